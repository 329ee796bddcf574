/**
 * Set-up file of every project: at the end of each test file, the directories it made through
 * `tempDir` are removed. Registered before the file's own hooks, so it runs after them: the
 * file's servers and agents have stopped by then.
 */
import { afterAll } from 'vitest';
import { removeTempDirs } from './temp-dirs.js';

afterAll(removeTempDirs);
