/**
 * Every system file that boots a QEMU guest runs in the VM half of the system suite, where files run
 * one after another: two files' emulated guests booting at once beside the chaos lanes' starve a
 * 2-core host. A file boots guests when it uses the VM helpers or the chaos VM cells.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  DOCKER_ONLY_ENGINE,
  ENGINE_CHAOS,
  engineFiles,
  SYSTEM_PART_VM,
  systemPart,
} from '../../helpers/test-projects.js';

const ROOT = join(import.meta.dirname, '../../..');
const BOOTS_GUESTS = /helpers\/vm\.js|chaos\/vm-cell\.js/;

const systemFiles = readdirSync(join(ROOT, 'test/system'))
  .filter((f) => f.endsWith('.test.ts'))
  .map((f) => `test/system/${f}`);

describe('the system suite halves', () => {
  it('puts every file that boots a guest in the VM half', () => {
    const booting = systemFiles.filter((f) => BOOTS_GUESTS.test(readFileSync(join(ROOT, f), 'utf8')));
    expect(booting.length).toBeGreaterThan(0);
    expect(booting.filter((f) => !SYSTEM_PART_VM.includes(f))).toEqual([]);
  });

  it('lists only files that exist, and the two halves split the suite without overlap', () => {
    for (const f of SYSTEM_PART_VM) expect(systemFiles).toContain(f);
    const rest = systemPart('rest');
    expect(rest.exclude).toEqual(expect.arrayContaining(SYSTEM_PART_VM));
    expect(systemPart('vm').include).toEqual(SYSTEM_PART_VM);
  });
});

describe('the engine suite parts', () => {
  it('runs the chaos file alone, the rest without it, and the whole suite with it', () => {
    expect(readdirSync(join(ROOT, 'test/system/engine')).map((f) => `test/system/engine/${f}`)).toContain(
      ENGINE_CHAOS,
    );
    for (const engine of ['docker', 'podman']) {
      expect(engineFiles(engine, 'chaos').include).toEqual([ENGINE_CHAOS]);
      expect(engineFiles(engine, 'rest').exclude).toContain(ENGINE_CHAOS);
      expect(engineFiles(engine, undefined).exclude).not.toContain(ENGINE_CHAOS);
      expect(engineFiles(engine, 'rest').include).toEqual(engineFiles(engine, undefined).include);
    }
    expect(engineFiles('podman', 'rest').exclude).toEqual(expect.arrayContaining(DOCKER_ONLY_ENGINE));
    expect(engineFiles('docker', 'rest').exclude).toEqual([ENGINE_CHAOS]);
    expect(() => engineFiles('docker', 'half')).toThrow(/KICI_ENGINE_PART/);
  });
});
