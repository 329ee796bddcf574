/**
 * The orchestrator checks the host's shell once (host-shell.ts) and tells its bare-metal agents
 * the verdict: the check runs once however often it is asked, nothing is told before it passed,
 * and a check that fails or throws is never taken for a pass.
 */
import { describe, expect, it } from 'vitest';
import { HostShellCheck } from '../../../../src/scaler/backends/bare-metal/host-shell.js';

/** A check the test settles by hand. */
function manual() {
  let settle!: (why: string | undefined) => void;
  let fail!: (err: Error) => void;
  let runs = 0;
  const check = () => {
    runs++;
    return new Promise<string | undefined>((ok, no) => ((settle = ok), (fail = no)));
  };
  return {
    check,
    settle: (w: string | undefined) => settle(w),
    fail: (e: Error) => fail(e),
    runs: () => runs,
  };
}

describe('the host shell check', () => {
  it('runs once, says no until it has passed, then yes', async () => {
    const m = manual();
    const c = new HostShellCheck(m.check);
    expect(c.passed()).toBe(false);
    expect(c.passed()).toBe(false);
    m.settle(undefined);
    expect(await c.known()).toBe(true);
    expect(c.passed()).toBe(true);
    expect(m.runs()).toBe(1);
  });

  it('a mismatch, or a check that throws, is never a pass', async () => {
    const a = manual();
    const mismatch = new HostShellCheck(a.check);
    mismatch.passed();
    a.settle("/bin/sh passes on more than the step's own variables");
    expect(await mismatch.known()).toBe(false);
    expect(mismatch.passed()).toBe(false);
    const b = manual();
    const broken = new HostShellCheck(b.check);
    broken.passed();
    b.fail(new Error('spawn failed'));
    expect(await broken.known()).toBe(false);
    expect(broken.passed()).toBe(false);
    expect(b.runs()).toBe(1);
  });

  it("the real check on this host's /bin/sh passes", async () => {
    const c = new HostShellCheck();
    expect(c.passed()).toBe(false);
    expect(await c.known()).toBe(true);
    expect(c.passed()).toBe(true);
  });
});
