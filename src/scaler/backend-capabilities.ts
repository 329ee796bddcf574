/** What a backend is, so policy code can ask instead of checking the backend type. */
export interface BackendCapabilities {
  /** Agents run on this host (they share its CPU, memory and machine pool). */
  localCompute: boolean;
  /**
   * `orchestrator`: agents live and die with this orchestrator, and shutdown destroys them.
   * `cluster`: agents belong to the cluster; this orchestrator stopping leaves them alone.
   */
  lifetime: 'orchestrator' | 'cluster';
  /** Implements cleanupOrphans (compute left behind by a crashed orchestrator). */
  cleansOrphans: boolean;
  /** Implements getLogCapture (agent output beyond what the agent streams itself). */
  capturesLogs: boolean;
  /**
   * Its agents run on compute provisioned elsewhere and may register with any orchestrator sharing
   * the store, which adopts them through their spawn row. So a spawn records where the scale-down
   * goes and counts against a cap kept on the store, the agent redeems a claim code the backend
   * issues (no token is minted here), and a stale provision is dropped here once a peer adopted it
   * or the reaper lease holder removed it. Such a backend has lifetime `cluster` and implements
   * `adopt` (with the recorded targets) and `forget`.
   */
  peerAdoptable: boolean;
  /**
   * It may start an agent while the spawn's record is still being written (SpawnContext.record):
   * its launcher removes such a start by itself should the orchestrator die before the record
   * exists, so a crash in between leaks nothing, and the record's write comes off the way from a
   * job's submit to its agent's start. Absent: the record is written before `spawn` is called.
   */
  provisionalLaunch?: boolean;
}

/**
 * Compute this orchestrator starts on its own host (processes, containers, micro-VMs): it dies with
 * the orchestrator, orphans of a crash are found and removed here, and its output can be captured.
 */
export const HOST_COMPUTE: Readonly<BackendCapabilities> = Object.freeze({
  localCompute: true,
  lifetime: 'orchestrator',
  cleansOrphans: true,
  capturesLogs: true,
  peerAdoptable: false,
});
