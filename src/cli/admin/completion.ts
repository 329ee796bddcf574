/**
 * `kici-admin completion bash|zsh|fish`: a completion script generated from the program's own
 * command tree, so every command and option the CLI has is completed and nothing else.
 */
import type { Command } from 'commander';
import { UsageError } from '../../util/errors.js';

export const SHELLS = ['bash', 'zsh', 'fish'] as const;
type Shell = (typeof SHELLS)[number];

interface Node {
  /** Words from the program name down, e.g. ['kici-admin', 'agent', 'token']. */
  path: string[];
  subcommands: string[];
  options: { flags: string[]; description: string }[];
}

function walk(cmd: Command, path: string[], out: Node[]): Node[] {
  const visible = cmd.commands.filter((c) => !(c as unknown as { _hidden?: boolean })._hidden);
  out.push({
    path,
    subcommands: visible.map((c) => c.name()),
    options: [
      ...cmd.options.map((o) => ({
        flags: [o.long, o.short].filter((f): f is string => !!f),
        description: o.description,
      })),
      { flags: ['--help'], description: 'show help' },
    ],
  });
  for (const c of visible) walk(c, [...path, c.name()], out);
  return out;
}

const shellWord = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

function bash(nodes: Node[], prog: string, fn: string): string {
  const entries = (pick: (n: Node) => string[]) =>
    nodes.map((n) => `  [${shellWord(n.path.join(' '))}]=${shellWord(pick(n).join(' '))}`).join('\n');
  return `# bash completion for ${prog}; load with: source <(${prog} completion bash)
declare -gA ${fn}_words=(
${entries((n) => n.subcommands)}
)
declare -gA ${fn}_opts=(
${entries((n) => n.options.flatMap((o) => o.flags))}
)
${fn}() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" path=${shellWord(prog)} w i
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="\${COMP_WORDS[i]}"
    [[ "$w" == -* ]] && continue
    [[ -n "\${${fn}_words["$path $w"]+x}" ]] && path="$path $w"
  done
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "\${${fn}_opts["$path"]}" -- "$cur"))
  else
    COMPREPLY=($(compgen -W "\${${fn}_words["$path"]}" -- "$cur"))
  fi
}
complete -o default -F ${fn} ${prog}
`;
}

function zsh(nodes: Node[], prog: string, fn: string): string {
  const entries = (pick: (n: Node) => string[]) =>
    nodes.map((n) => `  ${shellWord(n.path.join(' '))} ${shellWord(pick(n).join(' '))}`).join('\n');
  return `#compdef ${prog}
# zsh completion for ${prog}; load with: source <(${prog} completion zsh)
typeset -gA ${fn}_words ${fn}_opts
${fn}_words=(
${entries((n) => n.subcommands)}
)
${fn}_opts=(
${entries((n) => n.options.flatMap((o) => o.flags))}
)
${fn}() {
  local p=${shellWord(prog)} w i
  for (( i = 2; i < CURRENT; i++ )); do
    w=\${words[i]}
    [[ $w == -* ]] && continue
    (( \${+${fn}_words[$p $w]} )) && p="$p $w"
  done
  if [[ $PREFIX == -* ]]; then
    compadd -- \${=${fn}_opts[$p]}
  else
    compadd -- \${=${fn}_words[$p]}
  fi
}
compdef ${fn} ${prog}
`;
}

function fish(nodes: Node[], prog: string): string {
  const lines = [`# fish completion for ${prog}; load with: ${prog} completion fish | source`];
  lines.push(`complete -c ${prog} -f`);
  for (const n of nodes) {
    const below = n.path.slice(1);
    const seen = below.map((w) => `__fish_seen_subcommand_from ${w}`);
    const here = (leafOnly: boolean) => {
      const parts = below.length ? [...seen] : ['__fish_use_subcommand'];
      if (leafOnly && below.length && n.subcommands.length)
        parts.push(`not __fish_seen_subcommand_from ${n.subcommands.join(' ')}`);
      return shellWord(parts.join('; and '));
    };
    if (n.subcommands.length)
      lines.push(`complete -c ${prog} -n ${here(true)} -a ${shellWord(n.subcommands.join(' '))}`);
    for (const o of n.options) {
      const long = o.flags.find((f) => f.startsWith('--'));
      const short = o.flags.find((f) => /^-[^-]/.test(f));
      lines.push(
        `complete -c ${prog} -n ${here(false)}${long ? ` -l ${long.slice(2)}` : ''}${short ? ` -s ${short.slice(1)}` : ''} -d ${shellWord(o.description)}`,
      );
    }
  }
  return lines.join('\n') + '\n';
}

export function completionScript(root: Command, shell: string): string {
  if (!(SHELLS as readonly string[]).includes(shell))
    throw new UsageError(
      `completion: the shell is one of ${SHELLS.join(', ')}, got ${JSON.stringify(shell)}`,
    );
  const prog = root.name();
  const fn = `_${prog.replace(/[^A-Za-z0-9]/g, '_')}`;
  const nodes = walk(root, [prog], []);
  // The program's own options (--server, --token, …) are accepted after any command too.
  const globals = nodes[0]!.options.filter(
    (o) => !o.flags.includes('--help') && !o.flags.includes('--version'),
  );
  for (const n of nodes.slice(1)) n.options.push(...globals);
  const s = shell as Shell;
  return s === 'bash' ? bash(nodes, prog, fn) : s === 'zsh' ? zsh(nodes, prog, fn) : fish(nodes, prog);
}

export function registerCompletionCommand(program: Command): void {
  program
    .command('completion <shell>')
    .description(`print a shell completion script (${SHELLS.join(', ')})`)
    .option('--json', 'machine-readable output: {"shell", "script"}')
    .action((shell: string, o: { json?: boolean }) => {
      const script = completionScript(program, shell);
      if (o.json) process.stdout.write(JSON.stringify({ shell, script }, null, 2) + '\n');
      else process.stdout.write(script);
    });
}
