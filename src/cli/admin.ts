#!/usr/bin/env node
import { runAdmin } from './admin/program.js';

void runAdmin(process.argv.slice(2)).then((code) => process.exit(code));
