/**
 * npm run image:orchestrator — the orchestrator image, built by the same code as
 * `kici-admin image build-orchestrator` (src/image/build.ts), from the built dist/. The tag is
 * printed as the last line.
 *
 * Env: DOCKER_HOST or KICI_AGENT_IMAGE_HOSTS as for image:agent, KICI_ORCHESTRATOR_IMAGE_TAG
 * (override the reference).
 */
import { runImageScript } from './image-script.ts';

await runImageScript('build-orchestrator', process.env.KICI_ORCHESTRATOR_IMAGE_TAG, undefined);
