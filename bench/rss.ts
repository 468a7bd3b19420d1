/** A process's peak resident memory, as the benches report it for the worker. */
import { readFileSync, writeFileSync } from 'node:fs';

export function peakRssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1] ?? 0);
  return Math.round(kb / 1024);
}

/**
 * The process's peak RSS since the last call (VmHWM, then reset by writing 5 to clear_refs), so
 * that each part reports its own peak; without the right to reset, the peak so far.
 */
export function peakRssSince(pid: number): number {
  const peak = peakRssMb(pid);
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5');
  } catch {
    // Not permitted here: the next reading includes this one's.
  }
  return peak;
}
