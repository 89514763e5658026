import { studySlowdown } from './study.js';

console.log(studySlowdown('below', Number(process.argv[2] ?? 10)));
