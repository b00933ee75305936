/**
 * One shared clock for every "Age" on screen: a single timer, running only
 * while something shows an age, and re-rendering only the components that
 * read it (through `useSyncExternalStore`), not the whole list.
 */
import React from 'react';

type Listener = () => void;

class Clock {
  constructor(private readonly _periodMs: number) {}

  readonly subscribe = (listener: Listener): (() => void) => {
    this._listeners.add(listener);
    if (this._timer === 0) {
      this._now = Date.now();
      this._timer = window.setInterval(() => {
        this._now = Date.now();
        this._listeners.forEach(l => l());
      }, this._periodMs);
    }
    return () => {
      this._listeners.delete(listener);
      if (this._listeners.size === 0) {
        window.clearInterval(this._timer);
        this._timer = 0;
      }
    };
  };

  readonly now = (): number => (this._timer === 0 ? Date.now() : this._now);

  private _listeners = new Set<Listener>();
  private _timer = 0;
  private _now = Date.now();
}

const clocks = new Map<number, Clock>();

/** The current time (ms), refreshed every `periodMs`. */
export function useNow(periodMs: number): number {
  let clock = clocks.get(periodMs);
  if (!clock) {
    clock = new Clock(periodMs);
    clocks.set(periodMs, clock);
  }
  return React.useSyncExternalStore(clock.subscribe, clock.now);
}
