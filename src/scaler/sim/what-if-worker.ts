/**
 * A what-if run in a worker thread: a long trace keeps a core busy for seconds, and the
 * orchestrator's event loop must go on serving agents meanwhile.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { whatIf, type WhatIfInput } from './what-if.js';

parentPort!.postMessage(whatIf(workerData as WhatIfInput));
