import { describe, expect, it } from 'vitest';
import {
  detectLabelSetOverlaps,
  findDuplicateScalerNames,
  findLabelSetOverlaps,
  formatLabelSetOverlap,
} from '../../../src/config/index.js';

const s = (name: string, ...sets: string[][]) => ({ name, labelSets: sets.map((labels) => ({ labels })) });

describe('detectLabelSetOverlaps', () => {
  it('finds a normalised set declared by two scalers', () => {
    expect(
      detectLabelSetOverlaps([s('a', ['Linux', 'docker']), s('b', ['docker', 'linux', 'LINUX'])]),
    ).toEqual([{ labels: 'docker,linux', scaler1: 'a', scaler2: 'b' }]);
  });

  it('allows duplicates inside one scaler', () => {
    expect(detectLabelSetOverlaps([s('a', ['x'], ['X'])])).toEqual([]);
  });

  it('names the first owner for every later scaler, once per pair', () => {
    expect(detectLabelSetOverlaps([s('a', ['x']), s('b', ['x'], ['x']), s('c', ['x'])])).toEqual([
      { labels: 'x', scaler1: 'a', scaler2: 'b' },
      { labels: 'x', scaler1: 'a', scaler2: 'c' },
    ]);
  });

  it('subsets are not overlaps', () => {
    expect(detectLabelSetOverlaps([s('a', ['x']), s('b', ['x', 'y'])])).toEqual([]);
  });

  it('locates the later declaration', () => {
    expect(findLabelSetOverlaps([s('a', ['x']), s('b', ['y'], ['x'])])).toEqual([
      { labels: 'x', scaler1: 'a', scaler2: 'b', scalerIndex: 1, labelSetIndex: 1 },
    ]);
  });

  it('formats like the reload validation message', () => {
    expect(formatLabelSetOverlap({ labels: 'docker,linux', scaler1: 'a', scaler2: 'b' })).toBe(
      'Label set [docker,linux] overlaps between scalers "a" and "b"',
    );
  });
});

describe('findDuplicateScalerNames', () => {
  it('returns every index per duplicated name', () => {
    expect(findDuplicateScalerNames([{ name: 'a' }, { name: 'b' }, { name: 'a' }, { name: 'a' }])).toEqual([
      { name: 'a', indices: [0, 2, 3] },
    ]);
  });
  it('is empty for unique names', () =>
    expect(findDuplicateScalerNames([{ name: 'a' }, { name: 'A' }])).toEqual([]));
});
