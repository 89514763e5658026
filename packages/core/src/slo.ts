/**
 * SLO classes and their priorities. A class's priority is the band its requests wait in;
 * priority < 0 means sheddable. The admission layer may override this map from config.
 */
export type SloClassName = string;

export const DEFAULT_SLO_CLASS = 'standard';

export const DEFAULT_SLO_PRIORITIES: Readonly<Record<SloClassName, number>> = {
  critical: 4,
  standard: 3,
  batch: -1,
  sheddable: -2,
  background: -3,
};

export function isSheddablePriority(priority: number): boolean {
  return priority < 0;
}
