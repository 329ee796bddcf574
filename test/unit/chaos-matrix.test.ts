import { describe, expect, it } from 'vitest';
import { BACKENDS, ChaosTable, FAULTS } from '../chaos/matrix.js';

const clean = { jobs: 3, lost: 0, twice: 0, leakedAudit: 0, leakedHost: 0, reason: 'all succeeded' };

describe('the chaos table', () => {
  it('shows every fault and backend, and a cell nobody ran as "not run", never as a pass', () => {
    const t = new ChaosTable();
    t.set('agent killed mid-step', 'bare-metal', { status: 'ran', outcome: clean });
    const md = t.markdown();
    const lines = md.split('\n');
    expect(lines).toHaveLength(FAULTS.length + 2);
    for (const b of BACKENDS) expect(lines[0]).toContain(b);
    expect(md.match(/PASS/g)).toHaveLength(1);
    expect(md.match(/not run/g)).toHaveLength(FAULTS.length * BACKENDS.length - 1);
    expect(t.failures()).toEqual([]);
  });

  it('marks a leak, a lost job, a double run or an error as a failure', () => {
    const t = new ChaosTable();
    t.set('engine outage', 'docker', { status: 'ran', outcome: { ...clean, leakedHost: 1 } });
    t.set('kill -9 orchestrator', 'bare-metal', { status: 'ran', outcome: { ...clean, twice: 1 } });
    t.set('wall clock ±1 h', 'bare-metal', { status: 'error', error: 'serve did not start | boom' });
    t.set('nft flush ruleset', 'bare-metal', { status: 'n/a', why: 'no firewall' });
    expect(t.failures()).toEqual([
      'engine outage × docker',
      'wall clock ±1 h × bare-metal',
      'kill -9 orchestrator × bare-metal',
    ]);
    const md = t.markdown();
    expect(md).toMatch(/FAIL 3 jobs: lost 0, twice 0, leaked 0\/1/);
    expect(md).toMatch(/ERROR: serve did not start \/ boom/);
    expect(md).toMatch(/\| n\/a \|/);
  });
});
