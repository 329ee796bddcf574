/**
 * A fresh single-use agent's way from its hello to its job: on the embedded database every write
 * waits for the one before it, each with its own sync, so the registration's bookkeeping (the agents
 * row, the token's last use) must not be issued ahead of the bound job's claim. Recorded at the
 * store (a Kysely plugin compiling each statement as it is sent), on the real server and agent.
 */
import { fdatasyncSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { openDatabase, type OpenedDatabase } from '../../src/store/open.js';
import { freshDataDir, memoryDatabase } from '../helpers/data-dir.js';
import { failing, recording, SESSION_INSERT, SPAWN_ROW } from '../helpers/statement-fault.js';
import { AgentUserPool } from '../../src/scaler/backends/bare-metal/users.js';
import {
  AGENT_BIN,
  bareMetalConfig,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

let t: TestOrchestrator | undefined;
let opened: OpenedDatabase | undefined;
let dir: string | undefined;
afterEach(async () => {
  await t?.stop();
  await opened?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
  t = opened = dir = undefined;
});

const CLAIM = /^update "jobs" set "state" = \$1, "agent_id"/;

describe("a scaled agent's registration writes", () => {
  it("issues the agents row and the token's last use after the bound job's claim, not before", async () => {
    opened = await memoryDatabase();
    const { database, sent } = recording(opened);
    t = await startTestOrchestrator({ config: bareMetalConfig({ maxAgents: 1 }), database });
    const { status, body } = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { one: { runsOn: ['linux', 'small'], steps: [{ run: 'true' }] } },
    });
    expect(status).toBe(201);
    const done = await t.waitForJob(body.jobs[0]!.id);
    expect(done.state).toBe('succeeded');
    const first = (re: RegExp) => sent.findIndex((s) => re.test(s));
    // The agent's session, then the claim, and no other write between them. A log line of the
    // job's provisioning may be flushed at any moment and is left out.
    const session = first(SESSION_INSERT);
    const claim = sent.findIndex((s, i) => i > session && CLAIM.test(s));
    const agentsRow = first(/^insert into "agents"/);
    const stamp = first(/^update "agent_tokens" set "last_used_at"/);
    for (const [what, at] of Object.entries({ session, claim, agentsRow, stamp }))
      expect(at, `${what} never sent`).toBeGreaterThanOrEqual(0);
    expect(
      sent
        .slice(session + 1, claim)
        .filter((s) => /^(insert|update|delete|with)\b/.test(s) && !s.includes('job_log_chunks')),
    ).toEqual([]);
    // The agent's token was stored by this process with its spawn record: its first check is
    // answered without a read (src/store/unused-tokens.ts), nor is its session looked for.
    expect(sent.slice(first(SPAWN_ROW), claim).filter((s) => /from "agent_tokens"/.test(s))).toEqual([]);
    // The spawn row's registered stamp (one statement for both of its tables) tells a restart the
    // agent had registered; nothing on the way to the job reads it.
    const registeredStamp = first(
      /^with "spawning" as \(update "scaler_spawning_agents" set "registered_at".*update "scaler_spawn_times"/,
    );
    // Nothing else was queued, so the agent was asked for before the run was stored
    // (early-provision.ts): its spawn record, then the submit's insert, and no other write
    // between them (the admin call's audit row comes after the insert).
    const runInsert = first(/^insert into "runs"/);
    const jobsInsert = first(/^insert into jobs /);
    // The spawn record, its reservation, its decision time and the agent's token: one statement.
    const spawnRow = first(/^with "spawning" as \(insert into "scaler_spawning_agents"/);
    const audit = first(/^insert into "admin_audit"/);
    expect(spawnRow).toBeGreaterThanOrEqual(0);
    expect(runInsert).toBeGreaterThan(spawnRow);
    expect(jobsInsert).toBeGreaterThan(runInsert);
    for (const table of ['scaler_spawn_times', 'scaler_reservations', 'agent_tokens'])
      expect(sent[spawnRow]).toContain(`insert into "${table}"`);
    expect(sent.filter((s) => /^insert into "agent_tokens"/.test(s))).toEqual([]);
    expect(sent.filter((s) => /^select .* from "agent_sessions"/.test(s))).toEqual([]);
    expect(
      sent
        .slice(spawnRow + 1, runInsert)
        .filter((s) => /^(insert|update|delete|with)\b/.test(s) && !s.includes('job_log_chunks')),
    ).toEqual([]);
    expect(audit).toBeGreaterThan(jobsInsert);
    // The bookkeeping still happens, after the claim.
    expect(registeredStamp).toBeGreaterThan(claim);
    expect(agentsRow).toBeGreaterThan(claim);
    expect(stamp).toBeGreaterThan(claim);
  });

  it("lets the bound job's claim, synced once the job has left, carry the session's commit to disk", async () => {
    // On disk with each commit synced, every sync recorded among the statements and their answers,
    // and the server's log line for the job sent to the agent (written as it is sent).
    dir = await freshDataDir();
    const events: string[] = [];
    const fileSync = (fd: number) => {
      events.push('SYNC');
      fdatasyncSync(fd);
    };
    opened = await openDatabase({ dataDir: dir, dataSync: 'on', fileSync });
    const { database } = recording(opened, events);
    const logger = pino(
      { level: 'info' },
      { write: (line: string) => void (line.includes('"msg":"job dispatched"') && events.push('SENT')) },
    );
    t = await startTestOrchestrator({ config: bareMetalConfig({ maxAgents: 1 }), database, logger });
    const { body } = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { one: { runsOn: ['linux', 'small'], steps: [{ run: 'true' }] } },
    });
    events.push('ANSWERED');
    expect((await t.waitForJob(body.jobs[0]!.id)).state).toBe('succeeded');
    const at = (re: RegExp | string, from = 0) =>
      events.findIndex((e, i) => i >= from && (typeof re === 'string' ? e === re : re.test(e)));
    const session = at(SESSION_INSERT);
    const sessionDone = at(/^done: insert into "?agent_sessions"?/, session);
    const claim = at(CLAIM, session);
    const claimDone = at(/^done: update "jobs" set "state" = \$1, "agent_id"/, claim);
    const sent = at('SENT', claimDone);
    const synced = at('SYNC', claimDone);
    for (const [what, i] of Object.entries({ session, sessionDone, claim, claimDone, sent, synced }))
      expect(i, `${what} not seen`).toBeGreaterThanOrEqual(0);
    // Neither the session's commit nor the claim's syncs on its own. The job leaves, and then the
    // log up to the claim, the session's commit included, is synced (src/store/sync-gate.ts).
    expect(events.slice(session, claimDone).filter((e) => e === 'SYNC')).toEqual([]);
    expect(synced).toBeGreaterThan(sent);
    // The submit's commit is on disk before its answer.
    const submit = at(/^insert into jobs /);
    expect(events.slice(submit, at('ANSWERED', submit))).toContain('SYNC');
  });

  it("still stamps the spawn row when the session's write fails and the agent registers again", async () => {
    opened = await memoryDatabase();
    const { database, sent } = recording(opened);
    // The first session write fails in the store, as a dropped connection to it would.
    const faulty = failing(database, SESSION_INSERT);
    t = await startTestOrchestrator({ config: bareMetalConfig({ maxAgents: 1 }), database: faulty.database });
    const { body } = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { one: { runsOn: ['linux', 'small'], steps: [{ run: 'true' }] } },
    });
    expect((await t.waitForJob(body.jobs[0]!.id)).state).toBe('succeeded');
    expect(faulty.failed.n).toBe(1);
    // The agent came back and was let in (its session opened the second time).
    expect(sent.filter((s) => SESSION_INSERT.test(s))).toHaveLength(2);
    // The scaler counted it registered at the first attempt; the stamp that tells a restart so went.
    expect(
      sent.filter((s) => /^with "spawning" as \(update "scaler_spawning_agents" set "registered_at"/.test(s)),
    ).toHaveLength(1);
  });

  // Per-agent uids need root (as CI runs).
  it.runIf(process.getuid?.() === 0)(
    "claims the next agent's spare uid after the job's claim, not between the agent's hello and its job",
    async () => {
      opened = await memoryDatabase();
      const { database, sent } = recording(opened);
      // The pool's own method, observed: its claim of a spare is noted among the statements.
      const prepare = AgentUserPool.prototype.prepareSpare;
      AgentUserPool.prototype.prepareSpare = function (this: AgentUserPool) {
        sent.push('SPARE');
        prepare.call(this);
      };
      try {
        t = await startTestOrchestrator({
          config: bareMetalConfig({ maxAgents: 1 }, [
            { labels: ['linux', 'small'], binaryPath: AGENT_BIN, runAsUser: 'dynamic' },
          ]),
          database,
        });
        const { body } = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
          jobs: { one: { runsOn: ['linux', 'small'], steps: [{ run: 'true' }] } },
        });
        expect((await t.waitForJob(body.jobs[0]!.id)).state).toBe('succeeded');
        const session = sent.findIndex((s) => SESSION_INSERT.test(s));
        const claim = sent.findIndex((s, i) => i > session && CLAIM.test(s));
        expect(session).toBeGreaterThanOrEqual(0);
        expect(claim).toBeGreaterThan(session);
        expect(sent.indexOf('SPARE')).toBeGreaterThan(claim);
      } finally {
        AgentUserPool.prototype.prepareSpare = prepare;
      }
    },
  );
});
