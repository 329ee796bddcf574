#!/usr/bin/env node
/**
 * kici-agent's entry: arms the start gate (when the backend set one) before the agent's code loads,
 * so a gate signal sent while Node is still importing is caught rather than dropped.
 */
import { armStartGate } from '../agent/start-gate.js';

const gatePath = process.env.KICI_START_GATE;
const gate = gatePath ? armStartGate(gatePath) : undefined;
const { runAgentCli } = await import('./agent-main.js');
runAgentCli(gate);
