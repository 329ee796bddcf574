import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { checkRef, DEFAULT_ENGINE, engineTargets } from '../../src/image/engine-import.js';
import { UsageError } from '../../src/util/errors.js';

describe('image build: which engines, which reference', () => {
  it('--host wins, then KICI_AGENT_IMAGE_HOSTS, then DOCKER_HOST, then the default socket', () => {
    const env = { KICI_AGENT_IMAGE_HOSTS: 'unix:///a.sock unix:///b.sock', DOCKER_HOST: 'unix:///c.sock' };
    expect(engineTargets(['unix:///x.sock'], env)).toEqual({ hosts: ['unix:///x.sock'], source: '--host' });
    expect(engineTargets(undefined, env)).toEqual({
      hosts: ['unix:///a.sock', 'unix:///b.sock'],
      source: 'KICI_AGENT_IMAGE_HOSTS',
    });
    expect(engineTargets([], { ...env, KICI_AGENT_IMAGE_HOSTS: ' ' })).toEqual({
      hosts: ['unix:///c.sock'],
      source: 'DOCKER_HOST',
    });
    expect(engineTargets(undefined, {}).hosts).toEqual([DEFAULT_ENGINE]);
  });

  it('an engine URL that is not a unix socket is a usage error naming where it came from', () => {
    expect(() => engineTargets(undefined, { DOCKER_HOST: 'tcp://10.0.0.1:2376' })).toThrow(
      /^DOCKER_HOST: "tcp:\/\/10\.0\.0\.1:2376" is not a unix:\/\/\/path socket URL/,
    );
    expect(() => engineTargets(['unix://'], {})).toThrow(UsageError);
  });

  it('references: lower-case paths with an optional tag pass unchanged; anything with a space or upper case fails', () => {
    for (const ok of [
      'kici-agent',
      'kici-agent:0.1.0',
      'registry.example/ci/kici-agent:0.1.0-site1',
      'a_b/c:Tag_1',
    ])
      expect(checkRef(ok, '--tag')).toBe(ok);
    for (const bad of ['', 'Kici', 'a b', 'a:', ':tag', 'a//b', 'a:-x'])
      expect(() => checkRef(bad, '--tag'), bad).toThrow(/^--tag: /);
    fc.assert(
      fc.property(fc.string(), (s) => {
        let accepted = true;
        try {
          checkRef(s, '--tag');
        } catch (err) {
          accepted = false;
          expect(err).toBeInstanceOf(UsageError);
        }
        // Whatever passes has no whitespace and no upper case before the tag.
        if (accepted) expect(/\s/.test(s) || /[A-Z]/.test(s.split(':')[0]!)).toBe(false);
      }),
    );
  });
});
