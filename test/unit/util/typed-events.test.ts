import { describe, expect, it } from 'vitest';
import { TypedEvents } from '../../../src/util/typed-events.js';

interface Events {
  [name: string]: unknown;
  settled: { id: string };
  leader: boolean;
}

describe('TypedEvents', () => {
  it('calls each listener of the event, in order, until it is removed', () => {
    const ev = new TypedEvents<Events>();
    const heard: string[] = [];
    const off = ev.on('settled', (e) => heard.push(`a:${e.id}`));
    ev.on('settled', (e) => heard.push(`b:${e.id}`));
    ev.on('leader', (l) => heard.push(`leader:${l}`));
    ev.emit('settled', { id: '1' });
    off();
    ev.emit('settled', { id: '2' });
    ev.emit('leader', true);
    expect(heard).toEqual(['a:1', 'b:1', 'b:2', 'leader:true']);
  });

  it('next() resolves with the first matching event and then stops listening', async () => {
    const ev = new TypedEvents<Events>();
    const p = ev.next('settled', (e) => e.id === 'b');
    ev.emit('settled', { id: 'a' });
    ev.emit('settled', { id: 'b' });
    await expect(p).resolves.toEqual({ id: 'b' });
    let calls = 0;
    ev.on('settled', () => calls++);
    ev.emit('settled', { id: 'b' });
    expect(calls).toBe(1); // only the listener added after; next() removed its own
  });

  it('a throwing listener is reported and the others still run; emit never throws', () => {
    const errors: unknown[] = [];
    const ev = new TypedEvents<Events>((err) => errors.push(err));
    const heard: string[] = [];
    ev.on('settled', () => {
      throw new Error('listener bug');
    });
    ev.on('settled', (e) => heard.push(e.id));
    expect(() => ev.emit('settled', { id: 'x' })).not.toThrow();
    expect(heard).toEqual(['x']);
    expect(errors).toHaveLength(1);
  });

  it('the view listens but has no emit', () => {
    const view = new TypedEvents<Events>().view();
    expect(Object.keys(view).sort()).toEqual(['next', 'on']);
  });
});
