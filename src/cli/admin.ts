#!/usr/bin/env node
import './node-check.js';
import { runAdmin } from './admin/program.js';
import { exitWhenFlushed } from './exit.js';

void runAdmin(process.argv.slice(2)).then(exitWhenFlushed);
