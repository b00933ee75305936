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

// A pipeline: three steps joined left to right, as in a Dagster asset graph.
const PIPELINE_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <rect x="1.5" y="9" width="6" height="6" rx="1.2"/>
    <rect x="16.5" y="3" width="6" height="6" rx="1.2"/>
    <rect x="16.5" y="15" width="6" height="6" rx="1.2"/>
    <path d="M7.5 11.2h3.3V6.8h5.7v1.9h-3.8v6.6h3.8v1.9h-5.7v-4.4H7.5z"/>
  </g>
</svg>`;

export const pipelineIcon = new LabIcon({
  name: 'raylab:pipeline',
  svgstr: PIPELINE_SVG
});
