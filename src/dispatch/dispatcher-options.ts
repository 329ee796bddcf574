import type { ScalerManager } from '../scaler/manager.js';
import type { Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import type { JobObserver } from './active-job.js';

/** What a dispatcher is made with: its store and clock, and the clustering and tuning knobs. */
export interface DispatcherOptions {
  store: Store;
  clock: Clock;
  logger: Logger;
  scaler?: ScalerManager | undefined;
  /** How long a job waits for its agent to reconnect (static agents, and everyone after a restart). */
  reconnectGraceMs?: number;
  /** Extra time past a job's own timeout before the orchestrator settles it itself. */
  timeoutBackstopMs?: number;
  /** Told when a job starts and when its final state is stored (metrics). */
  observer?: JobObserver | undefined;
  /**
   * Several orchestrators on one database: take the right to scale for a job before spawning.
   * 'other' means another live instance provisions for it; 'gone' that it is no longer queued.
   */
  scaleClaim?: ((jobId: string) => Promise<'mine' | 'other' | 'gone'>) | undefined;
  /**
   * Several orchestrators on one database: this instance's id. Claims are stamped with it, and a
   * start adopts only the active jobs it owns (another instance's running jobs are not ours).
   */
  instanceId?: string | undefined;
  /** Another orchestrator on the same database could provision for these labels. */
  peersCould?: ((runsOn: readonly string[]) => boolean) | undefined;
  /** Read again what peers could provision for, before a job is judged "no backend". */
  refreshPeers?: (() => Promise<void>) | undefined;
  /** Is this peer instance alive (clustering)? A sealed job whose holder is gone can never run. */
  peerAlive?: ((instanceId: string) => Promise<boolean>) | undefined;
  /** Group commit tick for the results; default 20 ms (marks wait up to 250 ms; see GroupCommit). */
  groupCommitMs?: number | undefined;
  /**
   * Idle agents take new jobs in the submit's own commit (default true). False: every job is
   * queued first and claimed by a dispatch pass (tests of the pass's claim path).
   */
  claimAtSubmit?: boolean | undefined;
}
