import { firecrackerNetworkSchema, type ScalerConfig } from '../config/index.js';
import { checkNetwork, hostTools, networkDiagnoseRow } from '../scaler/backends/registry.js';
import { errorMessage } from '../util/errors.js';

/**
 * `diagnose`'s firecracker-network row for the running config: the VM bridge, and the NAT and
 * isolation chains in its table, read with the tools the VM scalers use (through sudo when they do).
 */
export async function vmNetworkCheck(config: ScalerConfig | undefined, hostEnv: NodeJS.ProcessEnv) {
  const vms = config?.scalers.filter((e) => e.type === 'firecracker') ?? [];
  if (!config || !vms.length) return undefined;
  const sudo = vms.some((e) => e.requireSudo);
  const network = config.firecracker ?? firecrackerNetworkSchema.parse({});
  try {
    return networkDiagnoseRow(await checkNetwork(hostTools(sudo, hostEnv, 5000), network));
  } catch (err) {
    return {
      name: 'firecracker-network',
      status: 'FAIL' as const,
      message: `could not check: ${errorMessage(err)}`,
    };
  }
}
