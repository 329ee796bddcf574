/**
 * `GET /api/v1/scaler/audit`: what the store says is alive against what each backend has.
 * `POST /api/v1/scaler/audit/fix`: the same, then reconcile (reclaim unrecorded compute, drop
 * records with nothing behind them, revoke tokens no agent holds).
 */
import type { Hono } from 'hono';
import type { AuditReport, ScalerAuditor } from '../scaler/audit/auditor.js';

const NOTHING: AuditReport = { drift: [], unchecked: [] };

export function registerScalerAuditRoutes(
  app: Hono,
  deps: { auditor?: () => ScalerAuditor | undefined },
): void {
  app.get('/api/v1/scaler/audit', async (c) => c.json((await deps.auditor?.()?.audit(false)) ?? NOTHING));
  app.post('/api/v1/scaler/audit/fix', async (c) =>
    c.json((await deps.auditor?.()?.audit(true)) ?? { ...NOTHING, fixed: [], remaining: [] }),
  );
}
