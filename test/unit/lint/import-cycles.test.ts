/** The import-cycle check wired into `npm run lint`: type-only imports count, stale allowlist entries fail. */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempDir } from '../../helpers/temp-dirs.js';
import { buildImportGraph, cycleProblems, findCycles } from '../../../scripts/check-import-cycles.ts';

async function tree(files: Record<string, string>): Promise<string> {
  const repo = await tempDir('kici-cycles-');
  for (const [path, text] of Object.entries(files)) {
    await mkdir(join(repo, path, '..'), { recursive: true });
    await writeFile(join(repo, path), text);
  }
  return repo;
}

describe('import cycle check', () => {
  it('finds a cycle made of a value import one way and a type-only import back', async () => {
    const repo = await tree({
      'src/manager.ts': "import { recover } from './recovery.js';\nexport class M {}\n",
      'src/recovery.ts': "import type { M } from './manager.js';\nexport const recover = (m: M) => m;\n",
      'src/leaf.ts': "import { x } from 'node:fs';\nimport './manager.js';\n",
    });
    const cycles = findCycles(buildImportGraph(repo));
    expect(cycles).toEqual([['src/manager.ts', 'src/recovery.ts']]);
    expect(cycleProblems(cycles, [])).toEqual(['import cycle: src/manager.ts <-> src/recovery.ts']);
    expect(cycleProblems(cycles, [['src/recovery.ts', 'src/manager.ts']])).toEqual([]);
  });

  it('follows multi-line and re-export specifiers, and reports an allowlisted cycle that is gone', async () => {
    const repo = await tree({
      'src/a.ts': "export {\n  b,\n} from './b.js';\n",
      'src/b.ts': "import {\n  type A,\n} from './a.js';\nexport const b = 1;\n",
      'src/c.ts': 'export const c = 1;\n',
    });
    const cycles = findCycles(buildImportGraph(repo));
    expect(cycles).toEqual([['src/a.ts', 'src/b.ts']]);
    expect(cycleProblems([], [['src/x.ts', 'src/y.ts']])).toEqual([
      'KNOWN_CYCLES entry is stale (remove it): src/x.ts <-> src/y.ts',
    ]);
  });
});
