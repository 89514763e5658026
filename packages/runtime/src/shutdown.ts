/**
 * Calls `shutdown(reason)` on SIGTERM and SIGINT and, with FAIRGATE_EXIT_WITH_STDIN=1, once
 * when stdin ends or closes: the process that started this one (testkit's spawnManaged with
 * exitWithStdin) holds its stdin, so when that process dies this one goes too. Each signal
 * calls again (the gateway's second signal cuts its drain short); stdin calls once.
 */
export function onShutdownRequest(shutdown: (reason: string) => void): void {
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  if (process.env.FAIRGATE_EXIT_WITH_STDIN !== '1') return;
  let gone = false;
  const stdinGone = () => {
    if (gone) return;
    gone = true;
    shutdown('stdin closed');
  };
  process.stdin.on('end', stdinGone);
  process.stdin.on('close', stdinGone);
  process.stdin.resume();
}
