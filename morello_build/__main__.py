from morello_build.cli import main

raise SystemExit(main())
