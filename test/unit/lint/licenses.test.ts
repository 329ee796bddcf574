/** The licence check run by `npm run licenses` in CI: SPDX expressions, the walk, and the verdict. */
import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempDir } from '../../helpers/temp-dirs.js';
import {
  checkPackages,
  countsTable,
  declaredLicense,
  isAllowed,
  productionPackages,
} from '../../../scripts/check-licenses.ts';

/** A fake install: `files` maps paths to package.json objects. */
async function tree(files: Record<string, object>): Promise<string> {
  const root = await tempDir('kici-licenses-');
  for (const [path, pkg] of Object.entries(files)) {
    await mkdir(join(root, path), { recursive: true });
    await writeFile(join(root, path, 'package.json'), JSON.stringify(pkg));
  }
  return root;
}

describe('SPDX expressions', () => {
  it('accepts single permissive ids, in any case, and the -only / + forms', () => {
    for (const e of ['MIT', 'mit', 'Apache-2.0', 'BSD-3-Clause', '0BSD', 'Python-2.0', 'Apache-2.0+'])
      expect(isAllowed(e), e).toBe(true);
  });

  it('needs one allowed side of an OR and both sides of an AND', () => {
    expect(isAllowed('(MIT OR Apache-2.0)')).toBe(true);
    expect(isAllowed('(GPL-3.0-only OR MIT)')).toBe(true);
    expect(isAllowed('MIT AND ISC')).toBe(true);
    expect(isAllowed('MIT AND GPL-3.0')).toBe(false);
    expect(isAllowed('(MIT AND BSD-3-Clause) OR GPL-2.0')).toBe(true);
    expect(isAllowed('MIT AND (LGPL-2.1 OR GPL-3.0)')).toBe(false);
    expect(isAllowed('Apache-2.0 WITH LLVM-exception')).toBe(true);
  });

  it('rejects copyleft, proprietary and anything it cannot parse', () => {
    for (const e of ['GPL-3.0', 'GPL-3.0-or-later', 'AGPL-3.0', 'MPL-2.0', 'UNLICENSED', 'SEE LICENSE IN x'])
      expect(isAllowed(e), e).toBe(false);
    for (const e of ['', '(MIT', 'MIT OR', 'MIT WITH', 'MIT ISC']) expect(isAllowed(e), e).toBe(false);
  });

  it('reads the deprecated object and array forms of the licence field', () => {
    expect(declaredLicense({ license: { type: 'ISC' } })).toBe('ISC');
    expect(declaredLicense({ licenses: [{ type: 'MIT' }, { type: 'GPL-2.0' }] })).toBe('(MIT OR GPL-2.0)');
    expect(declaredLicense({ license: '  ' })).toBeUndefined();
    expect(declaredLicense({})).toBeUndefined();
  });
});

describe('the production walk and the verdict', () => {
  it('follows production dependencies only, and names the GPL-3.0 and the unlicensed package', async () => {
    const root = await tree({
      '.': {
        name: 'app',
        license: 'Apache-2.0',
        dependencies: { ok: '1', copyleft: '1' },
        optionalDependencies: { absent: '1' },
        devDependencies: { devonly: '1' },
      },
      'node_modules/ok': { name: 'ok', version: '1.0.0', license: 'MIT', dependencies: { bare: '1' } },
      // Nested copy wins over the hoisted one, as in Node's resolution.
      'node_modules/ok/node_modules/bare': { name: 'bare', version: '2.0.0' },
      'node_modules/bare': { name: 'bare', version: '1.0.0', license: 'MIT' },
      'node_modules/copyleft': { name: 'copyleft', version: '3.1.0', license: 'GPL-3.0' },
      'node_modules/devonly': { name: 'devonly', version: '1.0.0', license: 'GPL-3.0' },
    });
    const { packages, missing } = productionPackages(root);
    expect(missing).toEqual([]);
    expect(packages.map((p) => `${p.name}@${p.version}`)).toEqual([
      'bare@2.0.0',
      'copyleft@3.1.0',
      'ok@1.0.0',
    ]);

    const report = checkPackages(packages, {});
    expect(report.problems).toEqual([
      'bare@2.0.0: no licence declared in its package.json',
      'copyleft@3.1.0: licence "GPL-3.0" is not on the allowlist (scripts/check-licenses.ts)',
    ]);
    expect(countsTable(report.counts)).toBe('LICENCE  PACKAGES\n(none)   1\nGPL-3.0  1\nMIT      1');
  });

  it('reports a required dependency that is not installed, and skips a missing optional peer', async () => {
    const root = await tree({
      '.': { name: 'app', dependencies: { a: '1', gone: '1' } },
      'node_modules/a': {
        name: 'a',
        version: '1.0.0',
        license: 'ISC',
        peerDependencies: { maybe: '1' },
        peerDependenciesMeta: { maybe: { optional: true } },
      },
    });
    const { packages, missing } = productionPackages(root);
    expect(packages.map((p) => p.name)).toEqual(['a']);
    expect(missing).toEqual(['gone (needed by the project)']);
  });

  it('lets a reviewed package through and reports a review that no longer matches', () => {
    const pkgs = [{ name: 'odd', version: '1.0.0', license: 'SEE LICENSE IN LICENSE.md' }];
    expect(checkPackages(pkgs, { odd: 'BSD-style, read by hand' }).problems).toEqual([]);
    expect(checkPackages(pkgs, { odd: 'x', old: 'y' }).problems).toEqual([
      'REVIEWED entry is stale (remove it): old',
    ]);
  });

  it("passes on this repository's own production tree", () => {
    const { packages, missing } = productionPackages(resolve(import.meta.dirname, '../../..'));
    expect(missing).toEqual([]);
    expect(packages.length).toBeGreaterThan(10);
    expect(checkPackages(packages).problems).toEqual([]);
  });
});
