import { firecrackerNetworkSchema, type ScalerConfig } from '../config/index.js';
import { createNftRunner } from '../net/nft-runner.js';
import { commandRunner } from '../scaler/backends/firecracker/host-net.js';
import { checkNetwork, networkDiagnoseRow } from '../scaler/backends/firecracker/host-setup.js';
import { errorMessage } from '../util/errors.js';

/**
 * `diagnose`'s firecracker-network row for the running config: the VM bridge, and the NAT and
 * isolation chains in its table, read with the tools the VM scalers use (through sudo when they do).
 */
export async function vmNetworkCheck(config: ScalerConfig | undefined) {
  const vms = config?.scalers.filter((e) => e.type === 'firecracker') ?? [];
  if (!config || !vms.length) return undefined;
  const sudo = vms.some((e) => e.requireSudo);
  const network = config.firecracker ?? firecrackerNetworkSchema.parse({});
  try {
    return networkDiagnoseRow(
      await checkNetwork(
        { run: commandRunner({ sudo, timeoutMs: 5000 }), nft: createNftRunner({ sudo }) },
        network,
      ),
    );
  } catch (err) {
    return {
      name: 'firecracker-network',
      status: 'FAIL' as const,
      message: `could not check: ${errorMessage(err)}`,
    };
  }
}
