// team-labels in JavaScript: labels every pod with the team named in the settings.
//
// Settings: `{"team": "ml"}`; `{}` labels nothing. A team that is not a label value is refused.
// Build: `npm run build` (componentize-js, world `decorator`).
import { hooks, isLabelValue, InvalidSettings, log, pod } from '../../../sdk-js/tfjob-policy/index.js';

const teamLabels = {
  settings(reader) {
    const team = reader.string('team', null);
    reader.done();
    if (team !== null && (team === '' || !isLabelValue(team))) {
      throw new InvalidSettings(`team: ${JSON.stringify(team)} is not a label value`);
    }
    return team;
  },

  decorate(ctx, team, p) {
    if (team) {
      log.info('labelling pod', { job: ctx.jobName, team });
      pod.labels(p).team = team;
    }
    return p;
  },
};

export const { settings, decorate } = hooks(teamLabels);
