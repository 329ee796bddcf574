/**
 * The scaler metric names docs/metrics.md lists, as a scrape must show them: name → the label
 * names its series carry (empty: an unlabelled series).
 */
export const SPEC_METRICS: Record<string, string[]> = {
  kici_orch_scaler_config_reloads_total: ['result'],
  kici_orch_scaler_cpus_used: ['scaler', 'scaler_type', 'machine_pool'],
  kici_orch_scaler_memory_bytes_used: ['scaler', 'scaler_type', 'machine_pool'],
  kici_orch_scaler_spawn_refusals_total: [],
  kici_orch_scaler_cap_lock_failures_total: ['reason'],
  kici_orch_scaler_spawn_failures_total: ['backend', 'bound'],
  kici_orch_scaler_adoption_lookup_failures_total: [],
  kici_orch_scaler_redispatch_total: ['trigger'],
  kici_orch_scaler_warm_pool_target: ['scaler', 'label_set'],
  kici_orch_scaler_warm_pool_ready: ['scaler', 'label_set'],
  kici_orch_scaler_warm_pool_in_flight: ['scaler', 'label_set'],
  kici_orch_scaler_warm_pool_spawns_total: ['scaler'],
  kici_orch_scaler_warm_pool_reaped_total: ['scaler'],
  kici_orch_scaler_scale_up_emitted_total: ['scaler'],
  kici_orch_scaler_scale_down_emitted_total: ['scaler', 'reason'],
  kici_orch_scaler_external_provisioning_active: ['scaler'],
  kici_orch_scaler_external_provision_timeout_total: ['scaler'],
  kici_orch_scaler_reap_unseen_provisions: [],
  kici_orch_scaler_reap_blocked: [],
  kici_orch_event_unmatched_total: ['event_name', 'reason'],
};
