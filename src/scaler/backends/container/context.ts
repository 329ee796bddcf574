import { normalizeLabelSet, type ScalerEntry } from '../../../config/index.js';
import type { ContainerRuntime } from '../container-runtime.js';
import type { Tracked } from './tracked.js';

/** What `diagnose` and the job timeline show about an agent container. */
export function scalerContext(
  entry: ScalerEntry,
  t: Tracked,
  runtime: ContainerRuntime,
): Record<string, unknown> {
  const key = normalizeLabelSet(t.agent.labelSet);
  const ls = entry.labelSets.find((l) => normalizeLabelSet(l.labels) === key);
  return {
    backendType: 'container',
    scalerName: entry.name,
    image: t.image,
    imagePullPolicy: ls?.imagePullPolicy ?? 'IfNotPresent',
    runtime,
    resources: ls?.resources,
    networkIsolation: entry.networkIsolation,
    volumes: ls?.volumes,
    extraHosts: entry.extraHosts,
    containerId: t.containerId,
  };
}
