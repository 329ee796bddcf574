/**
 * The log the agent writes through (kici-agent's, in one shape with the orchestrator's). Only a
 * type, so naming it loads nothing when the agent starts.
 */
export type AgentLog = (level: 'info' | 'warn' | 'error', msg: string) => void;
