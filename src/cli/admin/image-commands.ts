import type { Command } from 'commander';
import { checkRef, engineTargets } from '../../image/engine-import.js';
import type { ImageBuildOptions } from '../../image/build.js';

interface ImageFlags {
  tag?: string;
  host?: string[];
  node?: string;
  json?: boolean;
}

/**
 * `kici-admin image build-agent|build-orchestrator`: build an image from this installed package and
 * load it into local engines. These talk to an engine, not to an orchestrator, so they need no token.
 */
export function registerImageCommands(program: Command): void {
  const image = program
    .command('image')
    .description('build container images from this installed package, without a registry');
  const flags = (cmd: Command) =>
    cmd
      .option('--tag <ref>', 'image reference (default: <name>:<package version>)')
      .option(
        '--host <url...>',
        'engine sockets to load the image into, unix:///path (default: $KICI_AGENT_IMAGE_HOSTS, else $DOCKER_HOST, else unix:///var/run/docker.sock)',
      )
      .option('--node <file>', 'the Node binary to put in the image (default: the one running this)')
      .option('--json', 'print {"image": ref} instead of the bare reference');
  const print = (ref: string, o: ImageFlags) =>
    process.stdout.write(o.json ? `${JSON.stringify({ image: ref })}\n` : `${ref}\n`);
  const options = (o: ImageFlags): ImageBuildOptions => ({
    tag: o.tag === undefined ? undefined : checkRef(o.tag, '--tag'),
    engines: engineTargets(o.host, process.env),
    node: o.node,
    say: (m) => process.stderr.write(`image: ${m}\n`),
  });
  flags(image.command('build-agent'))
    .description('the agent image: the runtime container jobs run in (tag printed on stdout)')
    .action(async (o: ImageFlags) => {
      const opts = options(o);
      // Loaded on demand: staging pulls in modules the other commands never need.
      const { buildAgentImage } = await import('../../image/build.js');
      print(await buildAgentImage(opts), o);
    });
  flags(image.command('build-orchestrator'))
    .description(
      'the orchestrator image: serve as a non-root user, data dir as a volume (tag printed on stdout)',
    )
    .action(async (o: ImageFlags) => {
      const opts = options(o);
      const { buildOrchestratorImage } = await import('../../image/build.js');
      print(await buildOrchestratorImage(opts), o);
    });
}
