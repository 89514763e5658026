import type { GatewayMetrics } from '@fairgate/telemetry';

export type FencedOperation = 'renew' | 'take_peak' | 'control' | 'pod_set';

/**
 * What this replica's fenced writes did: accepted controller writes per epoch (an audit:
 * no two replicas may ever have writes accepted in the same epoch), stale ones rejected by
 * the fence, ticks dropped because leadership went away mid-tick. Shown on /admin/state.
 */
export class WriteLedger {
  readonly #acceptedByEpoch = new Map<number, number>();
  readonly #rejected: Record<FencedOperation, number> = {
    renew: 0,
    take_peak: 0,
    control: 0,
    pod_set: 0,
  };
  readonly #ledEpochs: number[] = [];
  #droppedTicks = 0;

  constructor(private readonly metrics: GatewayMetrics) {}

  elected(epoch: number): void {
    this.#ledEpochs.push(epoch);
  }

  accepted(epoch: number): void {
    this.#acceptedByEpoch.set(epoch, (this.#acceptedByEpoch.get(epoch) ?? 0) + 1);
  }

  rejected(operation: FencedOperation): void {
    this.#rejected[operation] += 1;
    this.metrics.staleFencedWrites.inc({ operation });
  }

  droppedTick(): void {
    this.#droppedTicks += 1;
    this.metrics.controllerTicksDropped.inc();
  }

  view() {
    return {
      led_epochs: [...this.#ledEpochs],
      accepted_writes_by_epoch: Object.fromEntries(this.#acceptedByEpoch),
      stale_writes_rejected: { ...this.#rejected },
      dropped_ticks: this.#droppedTicks,
    };
  }
}
