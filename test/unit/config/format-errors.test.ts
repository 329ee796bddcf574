import { describe, expect, it } from 'vitest';
import { parseDocument } from 'yaml';
import { z } from 'zod';
import { formatConfigError, formatYamlPath, isConfigInputError } from '../../../src/config/index.js';
import { UserError } from '../../../src/util/errors.js';
import { fileWith, parseFile } from './fixtures.js';

describe('formatYamlPath', () => {
  it.each<[PropertyKey[], string]>([
    [[], '(top level)'],
    [['version'], 'version'],
    [['scalers', 2, 'labelSets', 0, 'image'], 'scalers[2].labelSets[0].image'],
    [['scalers', 0, 'labelSets', 1, 'env', 'A-B'], 'scalers[0].labelSets[1].env["A-B"]'],
    [['env', 'has space'], 'env["has space"]'],
    [[0], '[0]'],
  ])('%j -> %s', (path, text) => expect(formatYamlPath(path)).toBe(text));
});

describe('formatConfigError', () => {
  const ctx = { configPath: 'conf/scalers.yaml' };

  it('turns every zod issue into file: path: message', () => {
    const result = parseFile(
      fileWith({ name: 'a', type: 'container', maxAgents: 0, labelSets: [{ labels: ['x'] }] }),
    );
    expect(formatConfigError(result.error, ctx)).toEqual([
      'conf/scalers.yaml: scalers[0].maxAgents: must be greater than 0, got number 0',
      'conf/scalers.yaml: scalers[0].labelSets[0].image: container scalers need an agent image (required)',
    ]);
  });

  it('formats YAML syntax errors with line and column and no code frame', () => {
    const doc = parseDocument('version: 1\nscalers: [\n');
    const lines = formatConfigError(doc.errors[0], ctx);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^conf\/scalers\.yaml: line \d+, column \d+: invalid YAML: \S/);
    expect(lines[0]).not.toContain('\n');
  });

  it.each([
    [{ code: 'ENOENT', path: 'x.yaml' }, 'x.yaml: file not found'],
    [{ code: 'EISDIR', path: 'x.yaml' }, 'x.yaml: is a directory, expected a YAML file'],
    [{ code: 'EACCES', path: 'x.yaml' }, 'x.yaml: permission denied'],
    [{ code: 'EIO', path: 'x.yaml' }, 'x.yaml: cannot read (EIO)'],
  ])('formats fs error %j', (props, line) => {
    const err = Object.assign(new Error('raw'), props);
    expect(formatConfigError(err, ctx)).toEqual([line]);
    expect(isConfigInputError(err)).toBe(true);
  });

  it('passes a UserError through as its problems', () => {
    expect(formatConfigError(new UserError('a', ['x: one', 'y: two']), ctx)).toEqual(['x: one', 'y: two']);
  });

  it('never prints a stack for an unknown error', () => {
    const lines = formatConfigError(new TypeError('boom'), ctx);
    expect(lines).toEqual(['conf/scalers.yaml: boom']);
    expect(isConfigInputError(new TypeError('boom'))).toBe(false);
    expect(formatConfigError('weird', ctx)).toEqual(['conf/scalers.yaml: weird']);
  });

  it('classifies ZodError, YAML errors and UserError as input errors', () => {
    expect(isConfigInputError(new z.ZodError([]))).toBe(true);
    expect(isConfigInputError(parseDocument('a: [').errors[0])).toBe(true);
    expect(isConfigInputError(new UserError('x'))).toBe(true);
  });
});
