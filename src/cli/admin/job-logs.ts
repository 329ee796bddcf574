/** Reading a job's log through the API, page by page, for `job logs` and `job submit --follow`. */
import type { AdminClient } from './client.js';
import { LogRenderer, type LogLineView, type StepView } from './job-log-render.js';

export const FINAL_STATES = new Set(['succeeded', 'failed', 'cancelled', 'timed-out', 'no-backend']);
/** The API returns at most this many lines per request. */
const PAGE = 10_000;

interface JobWithSteps {
  id: string;
  name: string;
  state: string;
  stepCount: number | null;
  steps: StepView[];
}

interface LogPage {
  state: string;
  logTruncated: boolean;
  lines: LogLineView[];
}

const enc = encodeURIComponent;

/** One job's log as it grows: call `poll` until it returns true (the job is final and fully read). */
export class JobLogReader {
  private after: number | undefined;
  private readonly renderer: LogRenderer;

  constructor(
    private readonly api: AdminClient,
    readonly jobId: string,
    private readonly out: { text?: (line: string) => void; json?: (record: unknown) => void },
    opts: { timestamps?: boolean; prefix?: string } = {},
  ) {
    this.renderer = new LogRenderer((l) => out.text?.(l), opts);
  }

  async poll(): Promise<{ done: boolean; steps: StepView[]; state: string; logTruncated: boolean }> {
    const before = await this.api.request<JobWithSteps>('GET', `/api/v1/jobs/${enc(this.jobId)}`);
    let page: LogPage;
    const lines: LogLineView[] = [];
    do {
      const q = this.after !== undefined ? `?after=${this.after}` : '';
      page = await this.api.request<LogPage>('GET', `/api/v1/jobs/${enc(this.jobId)}/logs${q}`);
      lines.push(...page.lines);
      if (page.lines.length) this.after = page.lines[page.lines.length - 1]!.id;
    } while (page.lines.length >= PAGE);
    const after =
      lines.length > 0
        ? await this.api.request<JobWithSteps>('GET', `/api/v1/jobs/${enc(this.jobId)}`)
        : before;
    this.renderer.setTotalSteps(before.stepCount);
    this.out.json?.(lines);
    this.renderer.feed(lines, before.steps, after.steps);
    // Final before the lines were read: nothing more can arrive.
    const done = FINAL_STATES.has(before.state);
    if (done) this.renderer.end(before.steps);
    return { done, steps: before.steps, state: before.state, logTruncated: page.logTruncated };
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Lines gathered into large writes: one write per line costs a system call each, which made a
 * log of half a million lines take seconds longer to print than to fetch.
 */
export class BatchedLines {
  private parts: string[] = [];
  private bytes = 0;

  constructor(
    private readonly write: (chunk: string) => void,
    private readonly maxBytes = 1024 * 1024,
  ) {}

  add(line: string): void {
    this.parts.push(line, '\n');
    this.bytes += line.length + 1;
    if (this.bytes >= this.maxBytes) this.flush();
  }

  flush(): void {
    if (!this.parts.length) return;
    const chunk = this.parts.join('');
    this.parts = [];
    this.bytes = 0;
    this.write(chunk);
  }
}
