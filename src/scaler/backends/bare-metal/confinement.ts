/**
 * How a bare-metal agent is kept away from the orchestrator's secrets (its data dir, admin token,
 * TLS key, home) and from other agents' work dirs. A job must never be the operator by default, so a
 * label set with no security key of its own gets the strongest mechanism the host allows:
 * - `users`: each agent runs as its own unprivileged uid (the orchestrator may change uid);
 * - `sandbox`: each agent runs in a bubblewrap sandbox that hides those paths (user namespaces);
 * - `host`: no confinement, only when the label set says `trust: host`.
 * A host that allows neither, with no opt-in, refuses the scaler, naming the fix.
 *
 * Everything here is pure: the facts come from host-probe.ts, so every host can be tested as a table.
 */

/** What the host lets this orchestrator process do, as probed at start-up. */
export interface HostFacts {
  /** The process runs as root. */
  root: boolean;
  /**
   * Capabilities held in the effective set (names like `CAP_SETUID`). Root holds them all; a
   * systemd unit can grant them to a service user with AmbientCapabilities=.
   */
  caps: ReadonlySet<string>;
  /** bwrap is on the orchestrator's PATH. */
  bwrap: boolean;
  /** setpriv is on the orchestrator's PATH (it makes the uid switch). */
  setpriv: boolean;
  /** bwrap started a sandbox as this process (as root it needs no user namespace). */
  userNamespaces: boolean;
}

export type ConfinementMode = 'users' | 'sandbox' | 'users+sandbox' | 'host';

/** The security keys of one label set, as far as confinement is concerned. */
export interface ConfinementRequest {
  runAsUser?: 'dynamic' | undefined;
  /** KICI_SANDBOX=true in the set's env or forwarded to every agent. */
  sandbox: boolean;
  trust?: 'host' | undefined;
}

export type ConfinementChoice =
  | { ok: true; mode: ConfinementMode; chosen: 'auto' | 'explicit'; why: string }
  | { ok: false; problem: string; fix: string };

/**
 * What a non-root orchestrator needs to run agents under their own uids: switch uid and gid, hand
 * the agent its home (chown), remove what the agent left there (it owns those files), and stop
 * every process of the agent's uid on destroy.
 */
export const USER_SWITCH_CAPS = [
  'CAP_SETUID',
  'CAP_SETGID',
  'CAP_CHOWN',
  'CAP_FOWNER',
  'CAP_DAC_OVERRIDE',
  'CAP_KILL',
] as const;

export function missingUserSwitchCaps(facts: HostFacts): string[] {
  if (facts.root) return [];
  return USER_SWITCH_CAPS.filter((c) => !facts.caps.has(c));
}

const canSwitchUser = (f: HostFacts) => f.setpriv && missingUserSwitchCaps(f).length === 0;
const canSandbox = (f: HostFacts) => f.bwrap && f.userNamespaces;

const FIX_USERS =
  'run the orchestrator as root, or grant it AmbientCapabilities=' + USER_SWITCH_CAPS.join(' ');
const FIX_SANDBOX = 'install bubblewrap (apt-get install bubblewrap) and allow unprivileged user namespaces';

/** Why the host cannot switch users, in words, for a refusal or a log line. */
function whyNoUsers(f: HostFacts): string {
  if (!f.setpriv) return 'setpriv is not on PATH';
  return `the orchestrator is not root and lacks ${missingUserSwitchCaps(f).join(', ')}`;
}

function whyNoSandbox(f: HostFacts): string {
  if (!f.bwrap) return 'bwrap is not on PATH';
  return 'bwrap cannot create a sandbox here (unprivileged user namespaces are off)';
}

export function chooseConfinement(facts: HostFacts, req: ConfinementRequest): ConfinementChoice {
  const explicitUsers = req.runAsUser === 'dynamic';
  if (explicitUsers && !canSwitchUser(facts))
    return {
      ok: false,
      problem: `runAsUser: dynamic cannot work: ${whyNoUsers(facts)}`,
      fix: `${FIX_USERS}, or remove runAsUser`,
    };
  if (req.sandbox && !canSandbox(facts))
    return { ok: false, problem: `KICI_SANDBOX=true cannot work: ${whyNoSandbox(facts)}`, fix: FIX_SANDBOX };
  if (explicitUsers || req.sandbox) {
    const mode: ConfinementMode =
      explicitUsers && req.sandbox ? 'users+sandbox' : explicitUsers ? 'users' : 'sandbox';
    return { ok: true, mode, chosen: 'explicit', why: 'asked for by the label set' };
  }
  if (req.trust === 'host')
    return {
      ok: true,
      mode: 'host',
      chosen: 'explicit',
      why: "trust: host: jobs run with the orchestrator user's access to its data dir, admin token and home",
    };
  if (canSwitchUser(facts))
    return {
      ok: true,
      mode: 'users',
      chosen: 'auto',
      why: facts.root
        ? 'the orchestrator runs as root'
        : 'the orchestrator holds the uid-switch capabilities',
    };
  if (canSandbox(facts))
    return {
      ok: true,
      mode: 'sandbox',
      chosen: 'auto',
      why: `bubblewrap works here and per-agent users do not (${whyNoUsers(facts)})`,
    };
  return {
    ok: false,
    problem: `no way to keep jobs away from the orchestrator's data dir and admin token: ${whyNoUsers(facts)}, and ${whyNoSandbox(facts)}`,
    fix: `${FIX_SANDBOX}; or ${FIX_USERS}; or, for trusted builds only, set trust: host on the label set`,
  };
}

/** Does this mode run the agent under its own uid, and in the sandbox? */
export function modeParts(mode: ConfinementMode): { user: boolean; sandbox: boolean } {
  return {
    user: mode === 'users' || mode === 'users+sandbox',
    sandbox: mode === 'sandbox' || mode === 'users+sandbox',
  };
}
