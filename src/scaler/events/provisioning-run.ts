import type { Sealed } from '../../dispatch/sealed-env.js';
import type { RunSpec } from '../../jobs/run-spec.js';
import type { ScaleEventName, ScalerScaleDownPayload, ScalerScaleUpPayload } from './payloads.js';

/**
 * A scale-up payload carries a claim code, which must never be stored in the clear: the run to store
 * loses KICI_EVENT_PAYLOAD, which the job gets only when it is dispatched; the code and the payload
 * are masked in its log. Other payloads hold nothing secret and are stored as they are.
 */
export function sealClaimCode(
  run: RunSpec,
  payload: ScalerScaleUpPayload | ScalerScaleDownPayload,
): { spec: RunSpec; sealed?: Sealed } {
  if (!('claimCode' in payload)) return { spec: run };
  const json = JSON.stringify(payload);
  const jobs: RunSpec['jobs'] = {};
  for (const [jobName, job] of Object.entries(run.jobs)) {
    const env = { ...job.env };
    delete env.KICI_EVENT_PAYLOAD;
    jobs[jobName] = { ...job, env };
  }
  return {
    spec: { ...run, jobs },
    sealed: { env: { KICI_EVENT_PAYLOAD: json }, mask: [payload.claimCode, json] },
  };
}

/**
 * The template as a run for this event: every job gets the event in its environment, a first step
 * that writes the payload to KICI_EVENT_PATH, and is kept off the scaler it provisions for.
 */
export function provisioningRun(
  template: RunSpec,
  name: ScaleEventName,
  eventId: string,
  payload: ScalerScaleUpPayload | ScalerScaleDownPayload,
): RunSpec {
  const own = `kici:scaler:${payload.scalerName}`;
  const jobs: RunSpec['jobs'] = {};
  for (const [jobName, job] of Object.entries(template.jobs)) {
    jobs[jobName] = {
      ...job,
      excludeLabels: [...new Set([...(job.excludeLabels ?? []), own])],
      env: {
        ...job.env,
        KICI_EVENT_NAME: name,
        KICI_EVENT_ID: eventId,
        KICI_EVENT_PATH: `/tmp/kici-event-${eventId}.json`,
        KICI_EVENT_PAYLOAD: JSON.stringify(payload),
      },
      steps: [
        {
          name: 'kici: write the event payload',
          run: `umask 077 && printf '%s' "$KICI_EVENT_PAYLOAD" > "$KICI_EVENT_PATH"`,
        },
        ...job.steps,
      ],
    };
  }
  return { name: `${template.name ?? 'provisioning'} (${name} ${payload.agentId})`, jobs };
}
