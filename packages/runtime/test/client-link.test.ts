import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { ClientLink } from '../src/index.js';

/** A response stand-in: 'close' with or without the body fully written. */
function fakeResponse(): ServerResponse & { close(finished: boolean): void } {
  const emitter = new EventEmitter() as EventEmitter & { writableFinished: boolean };
  emitter.writableFinished = false;
  return Object.assign(emitter, {
    close(finished: boolean) {
      emitter.writableFinished = finished;
      emitter.emit('close');
    },
  }) as unknown as ServerResponse & { close(finished: boolean): void };
}

describe('ClientLink', () => {
  it('runs every listener once when the response closes unfinished', () => {
    const response = fakeResponse();
    const link = ClientLink.ofResponse(response);
    const calls: string[] = [];
    link.onLeave(() => calls.push('a'));
    link.onLeave(() => calls.push('b'));
    response.close(false);
    link.leave();
    expect(link.gone).toBe(true);
    expect(calls).toEqual(['a', 'b']);
  });

  it('does not fire when the response was fully written', () => {
    const response = fakeResponse();
    const link = ClientLink.ofResponse(response);
    let fired = false;
    link.onLeave(() => {
      fired = true;
    });
    response.close(true);
    expect(link.gone).toBe(false);
    expect(fired).toBe(false);
  });

  it('skips an unsubscribed listener', () => {
    const controller = new AbortController();
    const link = ClientLink.ofSignal(controller.signal);
    const calls: string[] = [];
    const stop = link.onLeave(() => calls.push('cancel'));
    link.onLeave(() => calls.push('abort'));
    stop();
    controller.abort();
    expect(calls).toEqual(['abort']);
  });

  it('runs a listener added after the client left at once', () => {
    const controller = new AbortController();
    controller.abort();
    const link = ClientLink.ofSignal(controller.signal);
    let fired = 0;
    link.onLeave(() => fired++);
    expect(link.gone).toBe(true);
    expect(fired).toBe(1);
  });
});
