import { LabIcon } from '@jupyterlab/ui-components';
import React from 'react';

/**
 * An icon as inline SVG. Lighter than `LabIcon.react` (no hook, no
 * per-render style class), which matters at 200 cards × 7 buttons.
 */
function Icon(props: { icon: LabIcon }): React.ReactElement {
  return (
    <span
      className="jp-raylab-icon"
      aria-hidden="true"
      dangerouslySetInnerHTML={{ __html: props.icon.svgstr }}
    />
  );
}

export function IconButton(props: {
  icon: LabIcon;
  label: string;
  onClick: () => void;
  disabled?: boolean;
  className?: string;
}): React.ReactElement {
  return (
    <button
      type="button"
      className={`jp-Button jp-mod-minimal jp-raylab-icon-button ${props.className ?? ''}`}
      title={props.label}
      aria-label={props.label}
      disabled={props.disabled}
      onClick={props.onClick}
    >
      <Icon icon={props.icon} />
    </button>
  );
}
