import { WebSocket } from 'undici';

/**
 * A minimal DevTools protocol session over a Node process's inspector WebSocket (the
 * process runs with `--inspect=127.0.0.1:<port>`): bench:profile samples the gateway's CPU
 * through it, bench:waiting reads its heap after a full GC.
 */
export async function inspectorSession(port: number) {
  const list = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as Array<{
    webSocketDebuggerUrl: string;
  }>;
  const socket = new WebSocket(list[0]!.webSocketDebuggerUrl);
  await new Promise<void>((resolveOpen, reject) => {
    socket.addEventListener('open', () => resolveOpen(), { once: true });
    socket.addEventListener('error', () => reject(new Error('inspector connection failed')), {
      once: true,
    });
  });
  let nextId = 1;
  const pending = new Map<number, (result: unknown) => void>();
  socket.addEventListener('message', (event) => {
    const message = JSON.parse(String(event.data)) as { id?: number; result?: unknown };
    if (message.id !== undefined) pending.get(message.id)?.(message.result);
  });
  return {
    send<T>(method: string, params: Record<string, unknown> = {}): Promise<T> {
      const id = nextId++;
      return new Promise((resolveResult) => {
        pending.set(id, (result) => resolveResult(result as T));
        socket.send(JSON.stringify({ id, method, params }));
      });
    },
    close: () => socket.close(),
  };
}

/**
 * The JavaScript heap the process holds after a full garbage collection, in MB: what its
 * live objects take, without the garbage and the young generation's spare room that RSS
 * also counts (V8 sizes those by its own heuristics, run to run).
 */
export async function heapUsedAfterGcMb(port: number): Promise<number> {
  const session = await inspectorSession(port);
  try {
    await session.send('HeapProfiler.collectGarbage');
    const { usedSize } = await session.send<{ usedSize: number }>('Runtime.getHeapUsage');
    return usedSize / (1024 * 1024);
  } finally {
    session.close();
  }
}
