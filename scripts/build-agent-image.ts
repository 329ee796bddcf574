/**
 * npm run image:agent — the agent image, built by the same code as `kici-admin image build-agent`
 * (src/image/build.ts), from the built dist/. The tag is printed as the last line.
 *
 * Env: DOCKER_HOST (unix:///path; default /var/run/docker.sock), KICI_AGENT_IMAGE_HOSTS (several such
 * sockets, space-separated: the image is staged once and imported into each), KICI_AGENT_IMAGE_TAG
 * (override the reference), KICI_AGENT_IMAGE_NODE (another node binary).
 */
import { runImageScript } from './image-script.ts';

await runImageScript('build-agent', process.env.KICI_AGENT_IMAGE_TAG, process.env.KICI_AGENT_IMAGE_NODE);
