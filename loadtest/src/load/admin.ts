import { request } from 'undici';

/**
 * The pool as /admin/state shows it, sampled once a second during a run: budget, in flight,
 * waiting, leader, per-tenant in flight and waiting, the controller's cap and window, and
 * every controller action (collected by tick, so none is missed between samples).
 */
export interface AdminSample {
  /** Seconds from the run's start. */
  t: number;
  mode: string | null;
  budget: number;
  inflight: number;
  waiting: number;
  leader: string | null;
  replicas: number;
  tenants: Record<string, { inflight: number; waiting: number }>;
  /** Sum of the pods' caps (pods[].cap) and of their in-flight requests (absent: no pods listed). */
  podCap?: number;
  podInflight?: number;
  /** Pods taking grants: healthy, and not leaving (discovery dropped them). */
  livePods?: number;
  capPerWorker: number | null;
  controllerEnabled: boolean;
  windowP99S: number | null;
}

export interface SeenAction {
  tick: number;
  /** Seconds from the run's start when it was first seen (within 1 s of when it happened). */
  t: number;
  kind: string;
  code: string;
  reason: string;
  capBefore: number;
  capAfter: number;
  budget: number;
  p99S: number | null | 'errors';
}

type Json = Record<string, unknown>;
const num = (v: unknown, d = 0) => (typeof v === 'number' && Number.isFinite(v) ? v : d);
const str = (v: unknown) => (typeof v === 'string' ? v : null);

/** Reads the parts of an /admin/state body the load generator uses (tolerant of extra keys). */
export function parseAdminState(
  body: Json,
  t: number,
): { sample: AdminSample; actions: SeenAction[] } {
  const controller = (body.controller ?? {}) as Json;
  const window = (controller.window ?? {}) as Json;
  const tenants: AdminSample['tenants'] = {};
  const list = Array.isArray(body.tenants) ? (body.tenants as Json[]) : [];
  for (const entry of list) {
    const name = str(entry.tenant) ?? str(entry.id);
    if (name) tenants[name] = { inflight: num(entry.inflight), waiting: num(entry.waiting) };
  }
  const pods = Array.isArray(body.pods) ? (body.pods as Json[]) : [];
  const sample: AdminSample = {
    t,
    mode: str(body.mode),
    budget: num(body.budget),
    inflight: num(body.inflight),
    waiting: num(body.waiting),
    leader: str(body.leader),
    replicas: Array.isArray(body.replicas) ? body.replicas.length : 0,
    tenants,
    ...(pods.length > 0
      ? {
          podCap: pods.reduce((sum, p) => sum + num(p.cap), 0),
          podInflight: pods.reduce((sum, p) => sum + num(p.inflight), 0),
          livePods: pods.filter((p) => p.healthy === true && p.leaving !== true).length,
        }
      : {}),
    capPerWorker: typeof controller.cap_per_worker === 'number' ? controller.cap_per_worker : null,
    controllerEnabled: controller.enabled === true,
    windowP99S: typeof window.p99_ttft_s === 'number' ? window.p99_ttft_s : null,
  };
  const actions: SeenAction[] = [];
  if (Array.isArray(controller.actions)) {
    for (const a of controller.actions as Json[]) {
      const p99 = a.p99S;
      actions.push({
        tick: num(a.tick),
        t,
        kind: str(a.kind) ?? 'hold',
        code: str(a.code) ?? '',
        reason: str(a.reason) ?? '',
        capBefore: num(a.capBefore),
        capAfter: num(a.capAfter),
        budget: num(a.budget),
        p99S: typeof p99 === 'number' || p99 === 'errors' ? p99 : null,
      });
    }
  }
  return { sample, actions };
}

export class AdminPoller {
  readonly samples: AdminSample[] = [];
  readonly actions = new Map<number, SeenAction>();
  lastError: string | undefined;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  #inFlight: Promise<void> | undefined;

  constructor(
    private readonly targets: string[],
    private readonly token: string,
    private readonly clock: () => number,
  ) {}

  get latest(): AdminSample | undefined {
    return this.samples.at(-1);
  }

  /** The newest action that changed something (else the newest one). */
  get lastAction(): SeenAction | undefined {
    const all = [...this.actions.values()].sort((a, b) => a.tick - b.tick);
    return all.findLast((a) => a.kind !== 'hold') ?? all.at(-1);
  }

  async pollOnce(): Promise<void> {
    for (const target of this.targets) {
      try {
        const response = await request(`${target}/admin/state`, {
          headers: { authorization: `Bearer ${this.token}` },
          signal: AbortSignal.timeout(2_000),
        });
        if (response.statusCode !== 200) {
          await response.body.dump();
          this.lastError = `/admin/state: HTTP ${response.statusCode}`;
          continue;
        }
        const body = (await response.body.json()) as Json;
        const { sample, actions } = parseAdminState(body, this.clock() / 1_000);
        this.samples.push(sample);
        for (const action of actions)
          if (!this.actions.has(action.tick)) this.actions.set(action.tick, action);
        this.lastError = undefined;
        return;
      } catch (error) {
        this.lastError = `/admin/state: ${error instanceof Error ? error.message : String(error)}`;
      }
    }
  }

  start(intervalMs = 1_000): void {
    const loop = async () => {
      if (this.#stopped) return;
      this.#inFlight = this.pollOnce();
      await this.#inFlight;
      if (!this.#stopped) this.#timer = setTimeout(loop, intervalMs);
    };
    void loop();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    await this.#inFlight;
  }

  orderedActions(): SeenAction[] {
    return [...this.actions.values()].sort((a, b) => a.tick - b.tick);
  }
}

/** One row of GET /admin/usage (group_by tenant,model): what the pods reported at release. */
export interface UsageRow {
  tenant: string;
  model: string;
  requests: number;
  input_tokens: number;
  output_tokens: number;
  cached_tokens: number;
}

/**
 * The gateway's metered usage per tenant and model since `fromMs` (whole hours: the hour
 * the run started in, so it may include an earlier run's on the same Redis); undefined when
 * the gateway cannot tell (no such route, the embedded scheduler, a wrong token).
 */
export async function fetchUsage(
  target: string,
  token: string,
  fromMs: number,
): Promise<UsageRow[] | undefined> {
  try {
    const from = Math.floor(fromMs / 3_600_000) * 3_600;
    const response = await request(`${target}/admin/usage?group_by=tenant,model&from=${from}`, {
      headers: { authorization: `Bearer ${token}` },
      signal: AbortSignal.timeout(5_000),
    });
    if (response.statusCode !== 200) {
      await response.body.dump();
      return undefined;
    }
    const body = (await response.body.json()) as { data?: UsageRow[] };
    return Array.isArray(body.data) ? body.data : undefined;
  } catch {
    return undefined;
  }
}
