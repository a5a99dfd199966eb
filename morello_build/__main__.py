from morello_build.tools.cli import main

raise SystemExit(main())
