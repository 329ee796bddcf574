import type { Command } from 'commander';
import { ROLES } from '../../access/roles.js';
import { parseDurationMs } from '../../util/duration.js';
import { UsageError } from '../../util/errors.js';
import { age, printJson, table } from '../output.js';
import type { AdminClient } from './client.js';

interface AccessTokenView {
  id: string;
  name: string;
  role: string;
  bootstrap: boolean;
  state: 'active' | 'expired' | 'revoked';
  createdBy: string | null;
  createdAt: string;
  expiresAt: string | null;
  lastUsedAt: string | null;
}

interface AuditView {
  id: number;
  at: string;
  tokenName: string | null;
  role: string | null;
  action: string;
  target: string | null;
  result: string;
  status: number;
  remote: string | null;
}

/** `access token create|list|revoke` and `audit list`: who may operate the orchestrator, and what they did. */
export function registerAccessCommands(program: Command, client: (c: Command) => Promise<AdminClient>): void {
  const access = program.command('access').description("operators' access tokens (admin role)");
  const token = access.command('token').description('create, list and revoke access tokens');
  token
    .command('create')
    .description('make an access token; its secret is shown once')
    .requiredOption('--name <name>', 'what the token is for (shown in the audit trail)')
    .requiredOption('--role <role>', `${ROLES.join(', ')}`)
    .option('--expires-in <duration>', 'e.g. 12h, 30d (default: never)')
    .option('--json', 'machine-readable output')
    .action(async (o: { name: string; role: string; expiresIn?: string; json?: boolean }, cmd: Command) => {
      if (!(ROLES as readonly string[]).includes(o.role))
        throw new UsageError(`--role: one of ${ROLES.join(', ')}, got "${o.role}"`);
      let expiresInSeconds: number | undefined;
      if (o.expiresIn !== undefined) {
        const ms = parseDurationMs(o.expiresIn);
        if (ms === undefined)
          throw new UsageError(`--expires-in: a duration such as 90m, 12h or 30d, got "${o.expiresIn}"`);
        expiresInSeconds = Math.ceil(ms / 1000);
      }
      const res = await (
        await client(cmd)
      ).request<{ id: string; name: string; role: string; token: string; expiresAt: string | null }>(
        'POST',
        '/api/v1/access/tokens',
        { name: o.name, role: o.role, ...(expiresInSeconds ? { expiresInSeconds } : {}) },
      );
      if (o.json) return printJson(res);
      process.stdout.write(
        `access token ${res.id} "${res.name}" (${res.role}, expires ${res.expiresAt ?? 'never'}):\n${res.token}\n` +
          'It is shown only now; pass it as KICI_ADMIN_TOKEN or --token.\n',
      );
    });

  token
    .command('list')
    .description('access tokens (never their secret); --all adds revoked ones')
    .option('--all', 'include revoked tokens')
    .option('--json', 'machine-readable output')
    .action(async (o: { all?: boolean; json?: boolean }, cmd: Command) => {
      const res = await (
        await client(cmd)
      ).request<{ tokens: AccessTokenView[] }>('GET', `/api/v1/access/tokens${o.all ? '?all=true' : ''}`);
      if (o.json) return printJson(res.tokens);
      const now = new Date();
      process.stdout.write(
        table(
          ['ID', 'NAME', 'ROLE', 'STATE', 'CREATED', 'EXPIRES', 'LAST USED'],
          res.tokens.map((t) => [
            t.id,
            t.name,
            t.role,
            t.state,
            `${age(t.createdAt, now)} ago`,
            t.expiresAt ?? 'never',
            t.lastUsedAt ? `${age(t.lastUsedAt, now)} ago` : 'never',
          ]),
        ) + '\n',
      );
    });

  token
    .command('revoke <idOrName>')
    .description('revoke an access token: every instance refuses it from its next request')
    .option('--json', 'machine-readable output')
    .action(async (idOrName: string, o: { json?: boolean }, cmd: Command) => {
      const res = await (
        await client(cmd)
      ).request<AccessTokenView>('DELETE', `/api/v1/access/tokens/${encodeURIComponent(idOrName)}`);
      if (o.json) return printJson(res);
      process.stdout.write(`revoked access token ${res.id} "${res.name}" (${res.role})\n`);
    });

  program
    .command('audit')
    .description('the audit trail of admin calls (admin role)')
    .command('list')
    .description('mutating and refused calls, newest first')
    .option('--since <when>', 'a duration back from now (30m, 12h, 7d) or an ISO time')
    .option('--limit <n>', 'at most this many rows (default 1000)')
    .option('--json', 'machine-readable output')
    .action(async (o: { since?: string; limit?: string; json?: boolean }, cmd: Command) => {
      const q = new URLSearchParams();
      if (o.since !== undefined) q.set('since', o.since);
      if (o.limit !== undefined) q.set('limit', o.limit);
      const qs = q.size ? `?${q.toString()}` : '';
      const res = await (await client(cmd)).request<{ entries: AuditView[] }>('GET', `/api/v1/audit${qs}`);
      if (o.json) return printJson(res.entries);
      process.stdout.write(
        table(
          ['TIME', 'TOKEN', 'ROLE', 'ACTION', 'TARGET', 'RESULT', 'REMOTE'],
          res.entries.map((e) => [
            e.at,
            e.tokenName ?? '-',
            e.role ?? '-',
            e.action,
            e.target ?? '-',
            `${e.result} (${e.status})`,
            e.remote ?? '-',
          ]),
        ) + '\n',
      );
    });
}
