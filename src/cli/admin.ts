#!/usr/bin/env node
import { runAdmin } from './admin/program.js';
import { exitWhenFlushed } from './exit.js';

void runAdmin(process.argv.slice(2)).then(exitWhenFlushed);
