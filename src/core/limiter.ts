/**
 * At most `size` holders at once, across every caller that shares it: a worker-wide budget for
 * work that one activity would otherwise multiply (the cutover's drain runs several tables per
 * activity, each on its own pair of sessions).
 */
export class Limiter {
  private free: number;
  private readonly waiting: Array<() => void> = [];

  constructor(readonly size: number) {
    this.free = Math.max(1, Math.floor(size));
  }

  /**
   * Waits for a place and returns its release (idempotent). An abort while waiting gives up
   * the wait (the promise rejects with the signal's reason) and takes no place.
   */
  async acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) throw signal.reason;
    if (this.free > 0) {
      this.free -= 1;
    } else {
      await new Promise<void>((resolve, reject) => {
        const granted = () => {
          signal?.removeEventListener('abort', aborted);
          resolve();
        };
        const aborted = () => {
          const at = this.waiting.indexOf(granted);
          if (at >= 0) this.waiting.splice(at, 1);
          reject(signal!.reason);
        };
        this.waiting.push(granted);
        signal?.addEventListener('abort', aborted, { once: true });
      });
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiting.shift();
      if (next) next();
      else this.free += 1;
    };
  }
}
