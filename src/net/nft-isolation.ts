/**
 * AgentIsolation on nftables: per-address chains in one `inet` table (see nft-rules.ts). The table
 * is ours alone and uses no chain of Docker's or netavark's, so it works beside either engine.
 */
import { isIP } from 'node:net';
import { errorMessage } from '../util/errors.js';
import { IsolationError, type AgentIsolation, type AgentRuleRequest } from './isolation.js';
import { rulesetDamage, type RulesetDamage } from './nft-damage.js';
import { applyCommands, baseCommands, ipOfChain, removeCommands, type NftTableSpec } from './nft-rules.js';
import { isNftMissing, NftError, type NftObject, type NftRunner } from './nft-runner.js';

export interface NftIsolationOptions {
  runner: NftRunner;
  /** Table name; default `kici_agents`. */
  table?: string;
  /** The agents' bridge gateway; default 172.30.0.1. */
  gateway?: string;
  /**
   * The agents' subnet: reapStale only ever touches addresses inside it, and a packet from it with
   * no rules of its own is refused. Default 172.30.0.0/16.
   */
  subnet?: string;
  /**
   * How often the rules in force are compared with what was installed, while any are (default
   * 5000 ms; 0 turns the guard off). A table flushed under running agents is put back at the next
   * check, so an agent is unconfined for at most this long.
   */
  guardIntervalMs?: number;
  /** Where the guard says what it found and put back (or could not). */
  logger?: { warn(obj: object, msg: string): void; error(obj: object, msg: string): void };
}

/** What one guard check found damaged and put back. */
export type GuardResult = RulesetDamage & { restored: boolean };

export const DEFAULT_GUARD_INTERVAL_MS = 5_000;

export const DEFAULT_AGENT_TABLE = 'kici_agents';

export const NFT_REMEDY =
  'install nftables (Debian: apt-get install --no-install-recommends nftables) and run the orchestrator with CAP_NET_ADMIN (root, or requireSudo with passwordless sudo for nft), or set networkIsolation: false on this scaler (agents then reach every network the host reaches)';

function inSubnet(ip: string, cidr: string): boolean {
  const [net, lenText] = cidr.split('/');
  const len = Number(lenText ?? 32);
  const num = (a: string) => a.split('.').reduce((acc, p) => acc * 256 + Number(p), 0);
  if (isIP(ip) !== 4 || isIP(net!) !== 4) return false;
  const mask = len === 0 ? 0 : (0xffffffff << (32 - len)) >>> 0;
  return (num(ip) & mask) >>> 0 === (num(net!) & mask) >>> 0;
}

export class NftAgentIsolation implements AgentIsolation {
  readonly spec: NftTableSpec;
  private readonly subnet: string;
  private readonly runner: NftRunner;
  /** The base is set up once per instance; a failure is retried on the next call. */
  private base: Promise<void> | undefined;
  /** The rules this instance installed and has not removed: what the guard puts back. */
  private readonly applied = new Map<string, AgentRuleRequest>();
  private readonly guardIntervalMs: number;
  private readonly logger: NftIsolationOptions['logger'];
  private guardTimer: NodeJS.Timeout | undefined;
  /** One check at a time: a slow nft must not stack them up. */
  private checking: Promise<GuardResult> | undefined;

  constructor(opts: NftIsolationOptions) {
    this.runner = opts.runner;
    this.guardIntervalMs = opts.guardIntervalMs ?? DEFAULT_GUARD_INTERVAL_MS;
    this.logger = opts.logger;
    this.subnet = opts.subnet ?? '172.30.0.0/16';
    this.spec = {
      table: opts.table ?? DEFAULT_AGENT_TABLE,
      gateway: opts.gateway ?? '172.30.0.1',
      subnet: this.subnet,
    };
  }

  /** At backend creation: the message carries the fix, since start-up reports only the message. */
  async prepare(): Promise<void> {
    try {
      await this.ensureBase();
    } catch (err) {
      const e = err as IsolationError;
      throw new IsolationError(`${e.message}. Fix: ${e.remedy}`, e.remedy);
    }
  }

  /** Create the table and base chains (idempotent); throws IsolationError with the remedy. */
  ensureBase(): Promise<void> {
    this.base ??= this.exec(baseCommands(this.spec), 'could not set up the agent firewall').catch(
      (err: unknown) => {
        this.base = undefined;
        throw err;
      },
    );
    return this.base;
  }

  async apply(req: AgentRuleRequest): Promise<void> {
    if (isIP(req.ip) !== 4)
      throw new IsolationError(
        `agent ${req.agentId} has no IPv4 address ("${req.ip}")`,
        'check the agent network',
      );
    // A name would be resolved by nft once, at rule time; the rules would silently go stale.
    if (isIP(req.orchestrator.address) !== 4)
      throw new IsolationError(
        `agent ${req.agentId}: the orchestrator address "${req.orchestrator.address}" the agent dials is not an IPv4 address, so no firewall rule can admit it`,
        'set orchestratorUrl (scaler entry) or the server agentUrl to an IPv4 address, e.g. ws://172.30.0.1:8080/ws',
        'config',
      );
    // One batch: the old chains' contents and the new rules swap atomically. The base goes in the
    // same batch (it is idempotent), so a table emptied behind our back is whole again before this
    // agent's first packet: no new agent starts unconfined.
    await this.withBase(
      [...baseCommands(this.spec), ...applyCommands(req, this.spec)],
      `could not install the firewall rules for agent ${req.agentId} (${req.ip})`,
    );
    this.applied.set(req.ip, req);
    this.armGuard();
  }

  async remove(ip: string): Promise<void> {
    if (isIP(ip) !== 4) return;
    // Forgotten first, so a guard check running meanwhile does not put the rules back.
    this.applied.delete(ip);
    if (this.applied.size === 0) this.disarmGuard();
    await this.withBase(removeCommands(ip, this.spec), `could not remove the firewall rules for ${ip}`);
  }

  /** Run `commands` on the base; when the table vanished under us (flushed by hand), rebuild it once. */
  private async withBase(commands: Parameters<NftRunner['run']>[0], what: string): Promise<void> {
    await this.ensureBase();
    try {
      await this.runner.run(commands);
      return;
    } catch (err) {
      if (!isNftMissing(err)) throw this.wrap(err, what);
    }
    this.base = undefined;
    await this.ensureBase();
    await this.exec(commands, what);
  }

  async listRuled(): Promise<string[]> {
    let objects;
    try {
      objects = await this.runner.list(['table', 'inet', this.spec.table]);
    } catch (err) {
      if (isNftMissing(err)) return [];
      throw this.wrap(err, 'could not list the agent firewall');
    }
    const ips = new Set<string>();
    for (const o of objects) {
      const name = o.chain?.name;
      const ip = typeof name === 'string' ? ipOfChain(name) : undefined;
      if (ip) ips.add(ip);
    }
    return [...ips].sort();
  }

  async reapStale(live: ReadonlySet<string>): Promise<number> {
    const stale = (await this.listRuled()).filter((ip) => inSubnet(ip, this.subnet) && !live.has(ip));
    for (const ip of stale) await this.remove(ip);
    return stale.length;
  }

  /**
   * Compare the table with what this instance installed and put back anything missing, in one
   * batch (the base and each damaged address's rules are idempotent). Someone flushing the ruleset
   * leaves running agents unconfined (no table: everything passes) or cut off (base rebuilt by
   * hand: their addresses refused); either way it is logged and repaired here. Throws
   * IsolationError when nft cannot list or restore.
   */
  checkRuleset(): Promise<GuardResult> {
    this.checking ??= this.check().finally(() => (this.checking = undefined));
    return this.checking;
  }

  private async check(): Promise<GuardResult> {
    const agents = [...this.applied.values()];
    if (!agents.length) return { base: false, agents: [], restored: false };
    let objects: NftObject[];
    try {
      objects = await this.runner.list(['table', 'inet', this.spec.table]);
    } catch (err) {
      if (!isNftMissing(err)) throw this.wrap(err, 'could not list the agent firewall');
      objects = [];
    }
    // Every rule set was removed (or the table dropped) while we listed: nothing to put back.
    if (this.applied.size === 0) return { base: false, agents: [], restored: false };
    const damage = rulesetDamage(objects, this.spec, agents);
    if (!damage.base && !damage.agents.length) return { ...damage, restored: false };
    // Only what is still ours: an address removed while we listed stays removed.
    const redo = damage.agents.flatMap((ip) => {
      const req = this.applied.get(ip);
      return req ? [req] : [];
    });
    await this.exec(
      [...baseCommands(this.spec), ...redo.flatMap((req) => applyCommands(req, this.spec))],
      'could not restore the agent firewall',
    );
    this.logger?.warn(
      { table: this.spec.table, base: damage.base, agents: redo.map((r) => r.agentId) },
      'agent firewall rules were missing (flushed outside the orchestrator); restored them',
    );
    return { ...damage, restored: true };
  }

  private armGuard(): void {
    if (this.guardTimer || this.guardIntervalMs <= 0) return;
    this.guardTimer = setInterval(() => {
      this.checkRuleset().catch((err: unknown) =>
        this.logger?.error(
          { table: this.spec.table, err: errorMessage(err) },
          'agent firewall rules may be missing and could not be restored; running agents may be unconfined',
        ),
      );
    }, this.guardIntervalMs);
    // The guard keeps watch for running agents; it never keeps the process alive by itself.
    this.guardTimer.unref();
  }

  private disarmGuard(): void {
    clearInterval(this.guardTimer);
    this.guardTimer = undefined;
  }

  /** Stop the guard (the rules stay in force); apply arms it again. */
  close(): void {
    this.disarmGuard();
  }

  /** Remove the whole table (tests, and an operator turning isolation off for good). */
  async dropTable(): Promise<void> {
    this.applied.clear();
    this.disarmGuard();
    this.base = undefined;
    // A guard check that listed before this would put the base back after the delete. Its failure
    // is not this call's: whoever started the check (the guard's timer, a caller of checkRuleset)
    // already logs it, and the drop goes ahead either way.
    await this.checking?.catch(() => undefined);
    try {
      await this.runner.run([{ delete: { table: { family: 'inet', name: this.spec.table } } }]);
    } catch (err) {
      if (!isNftMissing(err)) throw this.wrap(err, 'could not remove the agent firewall table');
    }
  }

  private async exec(commands: Parameters<NftRunner['run']>[0], what: string): Promise<void> {
    try {
      await this.runner.run(commands);
    } catch (err) {
      throw this.wrap(err, what);
    }
  }

  private wrap(err: unknown, what: string): IsolationError {
    const detail = err instanceof NftError ? err.message : errorMessage(err);
    return new IsolationError(`${what} (table inet ${this.spec.table}): ${detail}`, NFT_REMEDY);
  }
}
