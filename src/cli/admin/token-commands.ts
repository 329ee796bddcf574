import type { Command } from 'commander';
import { age, printJson, table } from '../output.js';
import type { AdminClient } from './client.js';

interface TokenView {
  id: string;
  agentId: string;
  labels: string[];
  kind: 'static' | 'ephemeral';
  state: 'active' | 'expired' | 'revoked';
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
            t.state,
            `${age(t.createdAt, now)} ago`,
            t.expiresAt ? t.expiresAt : 'never',
            t.lastUsedAt ? `${age(t.lastUsedAt, now)} ago` : 'never',
            t.labels.join(','),
          ]),
        ) + '\n',
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
