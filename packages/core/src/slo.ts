/**
 * SLO classes and their priorities. A class's priority is the band its requests wait in
 * (the class table is the gateway config's `slo_classes`; its defaults are
 * DEFAULT_SLO_CLASSES in @fairgate/config).
 */
export type SloClassName = string;

export const DEFAULT_SLO_CLASS = 'standard';

/**
 * The one rule of what may be dropped for others: a class with priority < 0 is sheddable
 * (gaie-legacy admission, queue shedding, in-flight eviction); priority >= 0 is
 * SLO-protected (its TTFTs feed the controller's window).
 */
export function isSheddablePriority(priority: number): boolean {
  return priority < 0;
}
