import type { Command } from 'commander';
import { parseDurationMs } from '../../util/duration.js';
import { UsageError } from '../../util/errors.js';
import { age, printJson, table } from '../output.js';
import type { AdminClient } from './client.js';

interface TokenView {
  id: string;
  agentId: string;
  labels: string[];
  kind: 'static' | 'ephemeral';
  state: 'active' | 'expired' | 'revoked';
  /** Active, and expires within 14 days. */
  expiresSoon?: boolean;
  createdAt: string;
  expiresAt: string | null;
  revokedAt: string | null;
  lastUsedAt: string | null;
}

/** `agent token list` and `agent token revoke`: what an operator needs after minting. */
export function registerTokenAdminCommands(
  token: Command,
  client: (c: Command) => Promise<AdminClient>,
): void {
  token
    .command('list')
    .description('static agent tokens (never their secret); --all adds scaler tokens and revoked ones')
    .option('--all', 'include scaler-minted (ephemeral) and revoked tokens')
    .option('--json', 'machine-readable output')
    .action(async (o: { all?: boolean; json?: boolean }, cmd: Command) => {
      const res = await (
        await client(cmd)
      ).request<{ tokens: TokenView[] }>('GET', `/api/v1/agents/tokens${o.all ? '?all=true' : ''}`);
      if (o.json) return printJson(res.tokens);
      const now = new Date();
      process.stdout.write(
        table(
          ['TOKEN', 'AGENT', 'KIND', 'STATE', 'CREATED', 'EXPIRES', 'LAST USED', 'LABELS'],
          res.tokens.map((t) => [
            t.id,
            t.agentId,
            t.kind,
            t.expiresSoon ? 'expiring' : t.state,
            `${age(t.createdAt, now)} ago`,
            t.expiresAt ? t.expiresAt : 'never',
            t.lastUsedAt ? `${age(t.lastUsedAt, now)} ago` : 'never',
            t.labels.join(','),
          ]),
        ) + '\n',
      );
    });

  token
    .command('rotate <tokenId>')
    .description('issue a new token for the same agent; the old one keeps working for the grace')
    .option('--grace <duration>', 'how long the old token stays valid: 0, 90m, 12h, 7d (default: 24h)')
    .option('--json', 'machine-readable output')
    .action(async (tokenId: string, o: { grace?: string; json?: boolean }, cmd: Command) => {
      let graceSeconds: number | undefined;
      if (o.grace !== undefined) {
        const ms = o.grace === '0' ? 0 : parseDurationMs(o.grace);
        if (ms === undefined)
          throw new UsageError(`--grace: a duration such as 90m, 12h or 7d; got "${o.grace}"`);
        graceSeconds = Math.ceil(ms / 1000);
      }
      const res = await (
        await client(cmd)
      ).request<{
        tokenId: string;
        agentId: string;
        token: string;
        expiresAt: string | null;
        old: TokenView;
        graceSeconds: number;
      }>('POST', `/api/v1/agents/tokens/${encodeURIComponent(tokenId)}/rotate`, {
        ...(graceSeconds !== undefined ? { graceSeconds } : {}),
      });
      if (o.json) return printJson(res);
      process.stdout.write(
        `new token ${res.tokenId} for agent ${res.agentId} (expires ${res.expiresAt ?? 'never'}):\n${res.token}\n` +
          `The old token ${res.old.id} stays valid until ${res.old.expiresAt}. Restart the agent with KICI_AGENT_TOKEN set to the new one.\n`,
      );
    });

  token
    .command('revoke <tokenId>')
    .description('revoke a token: an agent holding it is disconnected at once (4401) and cannot reconnect')
    .option('--json', 'machine-readable output')
    .action(async (tokenId: string, o: { json?: boolean }, cmd: Command) => {
      const res = await (
        await client(cmd)
      ).request<TokenView & { disconnected: string[] }>(
        'DELETE',
        `/api/v1/agents/tokens/${encodeURIComponent(tokenId)}`,
      );
      if (o.json) return printJson(res);
      const dropped = res.disconnected.length ? `; disconnected ${res.disconnected.join(', ')}` : '';
      process.stdout.write(`revoked token ${res.id} (agent ${res.agentId})${dropped}\n`);
    });
}
