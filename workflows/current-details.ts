/**
 * The Web UI's current details of a migration or a change plan, rendered at most once per
 * activation however many changes it brought (a migration's hold a row for every table), and
 * through detailsOrFault: details are for people, and a fault in rendering them must not fail
 * the workflow task that carries the work on. The workflow thread runs an activation's
 * microtasks before it completes, and details are no command, so replay is unaffected.
 */
import { setCurrentDetails } from '@temporalio/workflow';
import { detailsOrFault } from '../src/core/details';

export class CurrentDetails {
  private queued = false;

  constructor(private readonly render: () => string) {}

  /** Renders them once the activation's other work is done. */
  request(): void {
    if (this.queued) return;
    this.queued = true;
    void Promise.resolve().then(() => {
      this.queued = false;
      setCurrentDetails(detailsOrFault(this.render));
    });
  }
}
