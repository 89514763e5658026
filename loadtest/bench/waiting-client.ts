/** bench:waiting's client: one streaming request per connection, and the gateway's gauges. */
import { type ClientRequest, request } from 'node:http';
import { TEST_KEYS } from '@fairgate/testkit';

/** One streaming chat request numbered `seq` (the upstream reads it from `user`). */
export class Stream {
  status = 0;
  sawDone = false;
  error: string | undefined;
  readonly finished: Promise<void>;
  #request: ClientRequest;

  constructor(port: number, seq: number) {
    const body = JSON.stringify({
      model: 'bench-model',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 2,
      stream: true,
      user: `seq-${seq}`,
    });
    let done!: () => void;
    this.finished = new Promise((resolve) => {
      done = resolve;
    });
    const headers = {
      authorization: `Bearer ${TEST_KEYS.paying}`,
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
    };
    const options = { host: '127.0.0.1', port, method: 'POST', agent: false, headers };
    this.#request = request({ ...options, path: '/v1/chat/completions' }, (response) => {
      this.status = response.statusCode ?? 0;
      let tail = '';
      response.setEncoding('latin1');
      response.on('data', (text: string) => {
        tail = (tail + text).slice(-32);
        if (tail.includes('[DONE]')) this.sawDone = true;
      });
      response.once('end', done);
      response.once('error', (error) => this.#fail(error, done));
    });
    this.#request.setNoDelay(true);
    this.#request.once('error', (error) => this.#fail(error, done));
    this.#request.end(body);
  }

  get served(): boolean {
    return this.status === 200 && this.sawDone;
  }

  close(): void {
    this.#request.destroy();
  }

  #fail(error: Error, done: () => void): void {
    this.error ??= error.message;
    done();
  }
}

/** Sends `count` streams in order, numbered from `first`. */
export function sendStreams(port: number, first: number, count: number): Stream[] {
  return Array.from({ length: count }, (_, j) => new Stream(port, first + j));
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
