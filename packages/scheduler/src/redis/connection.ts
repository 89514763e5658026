import { Cluster, type Command, Redis, type RedisOptions } from 'ioredis';

/** A connection the RedisScheduler runs on: one server (direct or through Sentinel) or a Cluster. */
export type RedisConnection = Redis | Cluster;

export interface HostPort {
  host: string;
  port: number;
}

/** Where the pool's Redis is: exactly one of the three shapes. */
export type RedisTopology =
  | { kind: 'standalone'; url: string }
  | { kind: 'sentinel'; sentinels: HostPort[]; name: string; password?: string }
  | { kind: 'cluster'; nodes: HostPort[]; password?: string };

export interface RedisConnectionOptions {
  topology: RedisTopology;
  /**
   * Most ms a command may take, queued or sent, before it fails with "Command timed out":
   * during an outage every caller gets an answer within this bound instead of waiting for
   * a reconnect. Blocking commands (BLPOP) run on a twin connection bounded by their own
   * wait instead (blockingDuplicate, CommandBound).
   */
  commandTimeoutMs: number;
  /** Longest pause between reconnect attempts (default 500 ms: recovery within a second). */
  reconnectMaxMs?: number;
  /**
   * Connection-level errors ('error' events). Always listened to, so ioredis never logs
   * "Unhandled error event"; callers count or log them.
   */
  onError?: (error: Error) => void;
}

/**
 * One ioredis connection for the scheduler. Commands fail fast while the server is away
 * (a bound per command, see `CommandBound`; no per-request retries: the caller decides),
 * reconnects keep trying forever with a short capped backoff, and 'error' events always
 * have a listener.
 */
export function createRedisConnection(options: RedisConnectionOptions): RedisConnection {
  const make = (bound: CommandBound): RedisConnection => {
    const connection = connect(options, bound);
    connection.on('error', options.onError ?? (() => {}));
    return connection;
  };
  const main = make({ kind: 'reply', timeoutMs: options.commandTimeoutMs });
  // A Cluster makes its node connections once its startup nodes resolve (never in the
  // constructor), each announced once with '+node'.
  if (main instanceof Cluster) main.on('+node', coalesceWrites);
  else coalesceWrites(main);
  blockingTwins.set(main, () => make({ kind: 'blocking', graceMs: BLOCKING_GRACE_MS }));
  return main;
}

function connect(options: RedisConnectionOptions, bound: CommandBound): RedisConnection {
  const reconnectMaxMs = options.reconnectMaxMs ?? 500;
  const common: RedisOptions = {
    enableAutoPipelining: false,
    maxRetriesPerRequest: 0,
    retryStrategy: (attempt: number) => Math.min(50 * attempt, reconnectMaxMs),
  };
  const { topology } = options;
  if (topology.kind === 'standalone') {
    return boundEveryCommand(new Redis(topology.url, common), bound);
  }
  if (topology.kind === 'sentinel') {
    return boundEveryCommand(
      new Redis({
        ...common,
        sentinels: topology.sentinels,
        name: topology.name,
        ...(topology.password ? { password: topology.password } : {}),
        sentinelRetryStrategy: (attempt: number) => Math.min(50 * attempt, reconnectMaxMs),
        // A failover closes connections to the old primary; reconnect to the new one at once.
        reconnectOnError: (error: Error) => /READONLY/.test(error.message),
        // A primary that stalls or is cut off (SIGSTOP, a partition) keeps its connections
        // open, so nothing above fires and every command times out on it for as long as it
        // stays away. Subscribed to the sentinels' +switch-master, the connection leaves it
        // as soon as they promote a replica (one extra connection per sentinel), and drops
        // the socket after 100 ms instead of waiting 2 s (ioredis's default) for a stalled
        // server to acknowledge the close.
        failoverDetector: true,
        disconnectTimeout: 100,
      }),
      bound,
    );
  }
  return boundEveryCommand(
    new Cluster(topology.nodes, {
      enableAutoPipelining: false,
      scaleReads: 'master',
      clusterRetryStrategy: (attempt: number) => Math.min(50 * attempt, reconnectMaxMs),
      redisOptions: {
        ...common,
        ...(topology.password ? { password: topology.password } : {}),
      },
    }),
    bound,
  );
}

/**
 * How long a command may wait for its reply.
 * - `reply`: every command fails with "Command timed out" after timeoutMs, whether it was
 *   sent or parked while disconnected (a parked one is still sent on reconnect, as with
 *   ioredis's commandTimeout).
 * - `blocking` (the BLPOP connection): a blocking wait fails graceMs after its own timeout,
 *   and the connection is dropped and made again, so a wait on a stalled server (SIGSTOP,
 *   a partition) returns and no late reply can reach a later command.
 *
 * Why not ioredis's own commandTimeout / blockingTimeout: their timers decide at once when
 * they fire. A process that was paused (SIGSTOP, a long GC pause, a starved CPU) runs its
 * due timers before it reads the replies that came in meanwhile, so they failed calls Redis
 * had answered in time, and a blocking timeout resolved BLPOP with null while Redis had
 * popped a grant notice for it: the notice was lost and its request waited until its lease
 * lapsed. Here the decision waits one more turn of the event loop, whose I/O phase reads
 * what is already in the socket.
 */
type CommandBound = { kind: 'reply'; timeoutMs: number } | { kind: 'blocking'; graceMs: number };

const BLOCKING_GRACE_MS = 1_000;
/** A blocking wait with no timeout of its own (0) is bounded by this. */
const BLOCKING_UNBOUNDED_MS = 60_000;

/** Blocking commands already bounded (a Cluster may send one command more than once). */
const bounded = new WeakSet<Command>();

/** Bounds one blocking command (BLPOP...) by its own wait plus the grace. */
function boundBlocking(connection: RedisConnection, command: Command, graceMs: number): void {
  if (!/^(blpop|brpop|blmove|blmpop|bzpopmin)$/i.test(command.name)) return;
  if (bounded.has(command)) return;
  bounded.add(command);
  let settled = false;
  const timer = setTimeout(() => {
    setImmediate(() => {
      if (settled) return;
      command.reject(new Error('Blocking wait timed out'));
      connection.disconnect(true);
    });
  }, blockingWaitMs(command) + graceMs);
  const settle = () => {
    settled = true;
    clearTimeout(timer);
  };
  command.promise.then(settle, settle);
}

/**
 * The `reply` bound of one connection: every command fails with "Command timed out" once
 * timeoutMs have passed since it was sent (or parked) without a reply. All share one timeout,
 * so deadlines come in send order: one queue and one timer per connection, instead of a timer
 * and two promise reactions per command (the gateway sends two or three commands per
 * request). A command is done once ioredis marks it resolved (`isResolved`, as its own
 * commandTimeout checks); one that was rejected meanwhile (an error reply, the connection
 * closed) stays queued until its deadline, when rejecting it again changes nothing. Answered
 * commands leave the head of the queue as new ones come, so it holds about what is in flight.
 * A command sent twice (a Cluster's MOVED or retry, the offline queue replayed after a
 * reconnect) is queued twice: its first deadline decides.
 */
class ReplyDeadlines {
  #commands: Command[] = [];
  #deadlines: number[] = [];
  #head = 0;
  #timer: NodeJS.Timeout | undefined;

  constructor(private readonly timeoutMs: number) {}

  add(command: Command): void {
    this.#dropAnswered();
    this.#commands.push(command);
    this.#deadlines.push(performance.now() + this.timeoutMs);
    if (!this.#timer) this.#arm();
  }

  #dropAnswered(): void {
    while (this.#head < this.#commands.length && this.#commands[this.#head]!.isResolved) {
      this.#head += 1;
    }
    if (this.#head === this.#commands.length) {
      this.#commands = [];
      this.#deadlines = [];
      this.#head = 0;
    } else if (this.#head >= 1_024 && this.#head * 2 >= this.#commands.length) {
      this.#commands = this.#commands.slice(this.#head);
      this.#deadlines = this.#deadlines.slice(this.#head);
      this.#head = 0;
    }
  }

  #arm(): void {
    const deadline = this.#deadlines[this.#head];
    if (deadline === undefined) return;
    // The decision waits one more turn (setImmediate): the I/O phase reads what is already
    // in the socket first (CommandBound).
    this.#timer = setTimeout(
      () => setImmediate(() => this.#expire(deadline)),
      Math.max(0, deadline - performance.now()),
    );
  }

  /** Fails every unanswered command whose deadline was due when the timer fired. */
  #expire(due: number): void {
    this.#timer = undefined;
    while (this.#head < this.#commands.length && this.#deadlines[this.#head]! <= due) {
      const command = this.#commands[this.#head]!;
      this.#head += 1;
      if (!command.isResolved) command.reject(new Error('Command timed out'));
    }
    this.#dropAnswered();
    this.#arm();
  }
}

/** A blocking command's own timeout in ms: its last argument (BLMPOP: its first), in seconds. */
function blockingWaitMs(command: Command): number {
  const at = /^blmpop$/i.test(command.name) ? 0 : command.args.length - 1;
  const seconds = Number(String(command.args[at]));
  return Number.isFinite(seconds) && seconds > 0 ? seconds * 1_000 : BLOCKING_UNBOUNDED_MS;
}

/**
 * Bounds every command `connection` sends, where it enters: for a Cluster that includes a
 * command parked in the Cluster's own offline queue (no node reachable, or before the first
 * slot map), which the node connections' timeouts never see.
 */
function boundEveryCommand<C extends RedisConnection>(connection: C, bound: CommandBound): C {
  const send = connection.sendCommand.bind(connection) as (...args: unknown[]) => unknown;
  if (bound.kind === 'reply') {
    const deadlines = new ReplyDeadlines(bound.timeoutMs);
    connection.sendCommand = (command: Command, ...rest: unknown[]) => {
      deadlines.add(command);
      return send(command, ...rest);
    };
  } else {
    connection.sendCommand = (command: Command, ...rest: unknown[]) => {
      boundBlocking(connection, command, bound.graceMs);
      return send(command, ...rest);
    };
  }
  return connection;
}

/**
 * Commands sent in one turn of the event loop leave in one socket write: under load the
 * releases and polls of the requests read in one poll phase share a writev instead of one
 * syscall each (on a 2-core VM a loopback write costs 20-40 µs, as much as the command's
 * own work in the gateway), and Redis reads them in one go. A command sent while earlier
 * ones await their replies (the connection is busy) corks the socket until the check phase
 * (setImmediate); one sent on an idle connection leaves at once, as does a lone request's
 * enqueue or the release a waiting request's grant hangs on: holding it to the end of the
 * poll phase saved nothing and kept it in the gateway 0.11 ms at p50 and 0.5 ms at p90
 * more while 3,000 requests waited (bench:waiting, 2-core VM).
 *
 * A command marked urgent (markUrgent: an enqueue, which its request waits on before it can
 * go to a pod) is not held for the check phase: it leaves at once, together with what the
 * turn corked before it (order kept), and the socket is corked again for the rest of the
 * turn. Held, its reply came a whole event-loop turn later under load (the write left at
 * the end of the turn, Redis answered while the next one ran, the answer was read in the
 * turn after): at c=16 that turn was a sixth of a request's time through the gateway
 * (bench:overhead, 2-core VM).
 *
 * Each command keeps its own reply, timeout and order: unlike ioredis's
 * enableAutoPipelining, nothing waits for an earlier batch's replies before it is sent. On a
 * Cluster each node connection coalesces its own writes.
 */
function coalesceWrites(connection: Redis): void {
  const send = connection.sendCommand.bind(connection) as (...args: unknown[]) => unknown;
  /** The socket this turn corked, until the check phase uncorks it. */
  let corked: Redis['stream'] | undefined;
  connection.sendCommand = (command: Command, stream?: unknown) => {
    const socket = connection.stream;
    if (
      !corked &&
      stream === undefined &&
      connection.status === 'ready' &&
      socket &&
      connection.commandQueue.length > 0
    ) {
      corked = socket;
      socket.cork();
      setImmediate(() => {
        corked = undefined;
        socket.uncork();
      });
    }
    const sent = send(command, stream);
    if (corked && corked === socket && (command as Urgent)[URGENT]) {
      corked.uncork();
      corked.cork();
    }
    return sent;
  };
}

const URGENT = Symbol('fairgate.urgentCommand');
type Urgent = { [URGENT]?: true };

/** Marks a command to leave at once even in a turn whose writes are held (coalesceWrites). */
export function markUrgent<T extends Command>(command: T): T {
  (command as T & Urgent)[URGENT] = true;
  return command;
}

/** The blocking twin of each connection made by createRedisConnection. */
const blockingTwins = new WeakMap<RedisConnection, () => RedisConnection>();

/**
 * A second connection like `connection` for blocking commands (BLPOP), bounded as
 * `CommandBound` says. A connection not made by createRedisConnection (tests pass their
 * own) gets a plain duplicate.
 */
export function blockingDuplicate(
  connection: RedisConnection,
  onError: (error: Error) => void = () => {},
): RedisConnection {
  const twin = blockingTwins.get(connection);
  if (twin) return twin();
  const duplicate = connection.duplicate();
  duplicate.on('error', onError);
  return duplicate;
}
