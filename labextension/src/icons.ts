import { LabIcon } from '@jupyterlab/ui-components';

// A cluster: a head node linked to three workers. `jp-icon3` lets the theme
// recolour it (light and dark).
const RAY_CLUSTER_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M12 6.2 5.6 17.3h12.8L12 6.2zm0 2.6 4.7 8.1H7.3L12 8.8z" opacity=".55"/>
    <circle cx="12" cy="5" r="3"/>
    <circle cx="4.6" cy="18.3" r="3"/>
    <circle cx="19.4" cy="18.3" r="3"/>
    <circle cx="12" cy="14" r="2"/>
  </g>
</svg>`;

export const rayClusterIcon = new LabIcon({
  name: 'raylab:cluster',
  svgstr: RAY_CLUSTER_SVG
});
