/**
 * bench:waiting's client: one streaming request per raw TCP connection (thousands at once,
 * each read just enough to know how it ended), and the gateway's waiting/in-flight gauges.
 */
import { connect, type Socket } from 'node:net';
import { TEST_KEYS } from '@fairgate/testkit';

/** One streaming request on its own connection. */
export class Stream {
  status = 0;
  done = false;
  sawDone = false;
  error: string | undefined;
  readonly finished: Promise<void>;
  #resolve!: () => void;
  #socket: Socket | undefined;
  #head = '';
  #tail = '';
  #contentLength = -1;
  #bodyBytes = 0;
  #chunked = false;

  constructor() {
    this.finished = new Promise((resolve) => {
      this.#resolve = resolve;
    });
  }

  open(port: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const socket = connect({ host: '127.0.0.1', port }, () => resolve());
      this.#socket = socket;
      socket.setNoDelay(true);
      socket.once('error', (error) => {
        this.#end(error.message);
        reject(error);
      });
      socket.on('data', (data: Buffer) => this.#onData(data));
      socket.once('close', () => this.#end(this.done ? undefined : 'closed'));
    });
  }

  /** Writes the streaming chat request numbered `seq` (the upstream reads it from `user`). */
  send(port: number, seq: number): void {
    const body = JSON.stringify({
      model: 'bench-model',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 2,
      stream: true,
      user: `seq-${seq}`,
    });
    this.#socket?.write(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\n` +
        `authorization: Bearer ${TEST_KEYS.paying}\r\ncontent-type: application/json\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
  }

  get served(): boolean {
    return this.status === 200 && this.sawDone;
  }

  close(): void {
    this.#socket?.destroy();
  }

  #onData(data: Buffer): void {
    let text = data.toString('latin1');
    if (!this.status) {
      this.#head += text;
      const end = this.#head.indexOf('\r\n\r\n');
      if (end < 0) return;
      const head = this.#head.slice(0, end);
      this.status = Number(head.slice(9, 12));
      const length = /\r\ncontent-length:\s*(\d+)/i.exec(head);
      if (length) this.#contentLength = Number(length[1]);
      this.#chunked = /\r\ntransfer-encoding:\s*chunked/i.test(head);
      text = this.#head.slice(end + 4);
      this.#head = '';
    }
    if (text.includes('[DONE]')) this.sawDone = true;
    this.#bodyBytes += text.length;
    this.#tail = (this.#tail + text).slice(-16);
    if (
      (this.#contentLength >= 0 && this.#bodyBytes >= this.#contentLength) ||
      (this.#chunked && this.#tail.endsWith('\r\n0\r\n\r\n'))
    ) {
      this.done = true;
      this.#end(undefined);
    }
  }

  #end(error: string | undefined): void {
    if (this.error === undefined && !this.done && error) this.error = error;
    this.#resolve();
  }
}

/** Opens `count` streams and sends them in order, numbered from `first`. */
export async function sendStreams(port: number, first: number, count: number): Promise<Stream[]> {
  const streams = Array.from({ length: count }, () => new Stream());
  await Promise.all(streams.map((s) => s.open(port)));
  for (const [j, s] of streams.entries()) s.send(port, first + j);
  return streams;
}

/** The gateway's fairgate_waiting and fairgate_inflight gauges. */
export async function gauges(url: string): Promise<{ waiting: number; inflight: number }> {
  const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(5_000) })).text();
  const read = (name: string) =>
    Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN);
  return { waiting: read('fairgate_waiting'), inflight: read('fairgate_inflight') };
}

/** Polls `check` every `everyMs` until it holds; throws after `timeoutMs`. */
export async function waitFor(
  what: string,
  check: () => Promise<boolean>,
  timeoutMs: number,
  everyMs = 5,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
  throw new Error(`${what}: not within ${timeoutMs} ms`);
}
