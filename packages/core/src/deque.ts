/**
 * A growable ring buffer: O(1) push at the back, shift at the front and rotation of the
 * front element to the back. Removal of an arbitrary element is O(n) and only used on the
 * rare paths that need it (global-strict fairness).
 */
export class Deque<T> {
  private items: (T | undefined)[] = new Array(8);
  private head = 0;
  private count = 0;

  get length(): number {
    return this.count;
  }

  front(): T | undefined {
    return this.count === 0 ? undefined : this.items[this.head];
  }

  pushBack(item: T): void {
    if (this.count === this.items.length) this.grow();
    this.items[(this.head + this.count) % this.items.length] = item;
    this.count += 1;
  }

  shift(): T | undefined {
    if (this.count === 0) return undefined;
    const item = this.items[this.head];
    this.items[this.head] = undefined;
    this.head = (this.head + 1) % this.items.length;
    this.count -= 1;
    return item;
  }

  /** Moves the front element to the back (the ring's "next turn"). */
  rotate(): void {
    const item = this.shift();
    if (item !== undefined) this.pushBack(item);
  }

  /** Removes the first occurrence of `item`; returns whether it was present. */
  remove(item: T): boolean {
    const all = this.toArray();
    const index = all.indexOf(item);
    if (index < 0) return false;
    all.splice(index, 1);
    this.items = new Array(Math.max(8, this.items.length));
    this.head = 0;
    this.count = 0;
    for (const kept of all) this.pushBack(kept);
    return true;
  }

  toArray(): T[] {
    const out: T[] = [];
    for (let i = 0; i < this.count; i += 1) {
      out.push(this.items[(this.head + i) % this.items.length] as T);
    }
    return out;
  }

  private grow(): void {
    const all = this.toArray();
    this.items = new Array(this.items.length * 2);
    this.head = 0;
    all.forEach((item, i) => {
      this.items[i] = item;
    });
  }
}
