/**
 * Compensation as a list of undo steps (docs/architecture.md §8). Push an idempotent undo *before* the step
 * it undoes (the step can commit and still lose its completion); compensate runs them newest
 * first in a non-cancellable scope, logs an undo that fails and keeps going.
 */
import { CancellationScope, log } from '@temporalio/workflow';

export interface UndoStep {
  name: string;
  run: () => Promise<unknown>;
}

export class Saga {
  private steps: UndoStep[] = [];

  push(name: string, run: () => Promise<unknown>): void {
    this.steps.push({ name, run });
  }

  /** Past the point of no return: nothing to undo any more. */
  clear(): void {
    this.steps = [];
  }

  /** Drops the undo steps of that name without running them; true when there were any. */
  discard(name: string): boolean {
    const before = this.steps.length;
    this.steps = this.steps.filter((s) => s.name !== name);
    return this.steps.length < before;
  }

  get size(): number {
    return this.steps.length;
  }

  /** The names of the undo steps, in the order compensate() runs them (newest first). */
  get names(): string[] {
    return this.steps.map((s) => s.name).reverse();
  }

  /** Runs every undo, newest first; returns the names of those that failed. */
  async compensate(): Promise<string[]> {
    const failed: string[] = [];
    const steps = this.steps.reverse();
    this.steps = [];
    await CancellationScope.nonCancellable(async () => {
      for (const step of steps) {
        try {
          await step.run();
        } catch (err) {
          log.error('compensation step failed', { step: step.name, error: String(err) });
          failed.push(step.name);
        }
      }
    });
    return failed;
  }
}
