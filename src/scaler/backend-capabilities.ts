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
}
