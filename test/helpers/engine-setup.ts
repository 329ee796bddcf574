/**
 * Every system-engine test file: after each test, drop the default agent table. Agents of any table
 * are refused unless that table has rules for them, so a table a test left behind would refuse the
 * next test's agents that another table (a test's own) admits.
 */
import { afterEach } from 'vitest';
import { DEFAULT_AGENT_TABLE } from '../../src/net/nft-isolation.js';
import { createNftRunner } from '../../src/net/nft-runner.js';

afterEach(async () => {
  await createNftRunner()
    .run([{ delete: { table: { family: 'inet', name: DEFAULT_AGENT_TABLE } } }])
    .catch(() => undefined); // no such table: nothing was left
});
