import React from 'react';

/** A table's order: by which column, descending or not. */
export interface ISort<K extends string> {
  readonly key: K;
  readonly down: boolean;
}

/** A cell's value for sorting; null is a '—' cell (not known). */
export type SortValue = string | number | null;

/**
 * Rows in the table's order. '—' cells go last whichever the direction: an
 * admin looking for the most (or fewest) idle GPUs wants figures first.
 * Equal values keep a stable order by `tieBreak`.
 */
export function sortRows<T>(
  rows: ReadonlyArray<T>,
  value: (row: T) => SortValue,
  down: boolean,
  tieBreak: (row: T) => string
): T[] {
  const sign = down ? -1 : 1;
  return [...rows].sort((a, b) => {
    const x = value(a);
    const y = value(b);
    if (x === null || y === null) {
      if (x !== y) {
        return x === null ? 1 : -1;
      }
    } else if (x !== y) {
      return sign * (x < y ? -1 : 1);
    }
    return sign * (tieBreak(a) < tieBreak(b) ? -1 : 1);
  });
}

/**
 * A sortable table's header cells: a click sorts by that column, a second
 * click reverses. Text columns (`ascendingFirst`) start A to Z, figures start
 * with the largest.
 */
export function SortableHeaders<K extends string>(props: {
  columns: ReadonlyArray<[K, string]>;
  sort: ISort<K>;
  onSort: (sort: ISort<K>) => void;
  ascendingFirst: ReadonlySet<K>;
}): React.ReactElement {
  const { sort, onSort } = props;
  return (
    <>
      {props.columns.map(([key, label]) => (
        <th
          key={key}
          aria-sort={
            sort.key === key ? (sort.down ? 'descending' : 'ascending') : 'none'
          }
        >
          <button
            type="button"
            className="jp-raylab-sort"
            onClick={() =>
              onSort({
                key,
                down:
                  sort.key === key ? !sort.down : !props.ascendingFirst.has(key)
              })
            }
          >
            {label}
          </button>
        </th>
      ))}
    </>
  );
}
